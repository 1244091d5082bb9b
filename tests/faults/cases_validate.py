"""``rlm-lab validate`` (issue 18 item 7): a hardware profile it cannot read is one line before any record is
read."""

from fault_matrix import Case


def write(data: bytes):
    def setup(tmp):
        (tmp / "p.json").write_bytes(data)
    return setup


CASES = [
    Case("profile-binary", "a binary file as --profile (was a UnicodeDecodeError traceback)",
         argv=["validate", "--profile", "{tmp}/p.json"], setup=write(bytes(range(256))),
         message=r"hardware profile .*p\.json is not a text \(JSON\) file \(byte 128 is not UTF-8\)"),
    Case("profile-not-json", "a --profile that is not JSON", argv=["validate", "--profile", "{tmp}/p.json"],
         setup=write(b"kind: cpu\n"), message=r"hardware profile .*p\.json is not valid JSON"),
    Case("profile-list", "a --profile holding a JSON list", argv=["validate", "--profile", "{tmp}/p.json"],
         setup=write(b"[1, 2]"), message=r"hardware profile .*p\.json must be a JSON object"),
    Case("profile-unknown", "an unknown --profile name", argv=["validate", "--profile", "nope"],
         message=r"unknown hardware profile 'nope'"),
]
