"""``rlm-lab insitu`` (issue 12: the per-call terms fitted on traced runs) given input it cannot use: one line
each, before any run starts or any profile is written."""

from fault_matrix import Case


def _existing_profile(tmp):
    (tmp / "p.json").write_text("{}")


def _empty_validation_root(tmp):
    (tmp / "val").mkdir()


CASES = [
    Case("size-unknown", "an unknown size", argv=["insitu", "--size", "huge"], message=r"unknown size 'huge'"),
    Case("size-without-suite", "a size with no calibration suite (gpu)", argv=["insitu", "--size", "gpu"],
         message=r"no in-situ calibration suite at size 'gpu'"),
    Case("base-unknown", "a base profile that does not exist", argv=["insitu", "--base", "nope"],
         message=r"unknown hardware profile 'nope'"),
    Case("bootstrap-negative", "a negative number of bootstrap resamples", argv=["insitu", "--bootstrap", "-1"],
         message=r"--bootstrap must be >= 0"),
    Case("write-exists", "a profile path that already holds a file, without --force", setup=_existing_profile,
         argv=["insitu", "--write", "{tmp}/p.json", "--out", "{tmp}/runs"],
         message=r"p\.json already exists; pass --force to replace it"),
    Case("no-records", "fitting a folder with no calibration records", argv=["insitu", "--out", "{tmp}/runs",
                                                                             "--write", "{tmp}/p.json"],
         message=r"no insitu_suite records in .*runs; run it first"),
    Case("validation-root-empty", "a --validation-root without a validation suite", setup=_empty_validation_root,
         argv=["insitu", "--validation-root", "{tmp}/val", "--out", "{tmp}/runs", "--write", "{tmp}/p.json"],
         message=r"holds no validation_suite/"),
    Case("max-load-negative", "a negative load limit", argv=["insitu", "--run", "--max-load", "-1", "--write", "{tmp}/p.json"],
         message=r"--max-load must be >= 0"),
]
CASES.append(Case("run-several-folders", "--run with more than one --out folder",
                  argv=["insitu", "--run", "--out", "{tmp}/a", "{tmp}/b", "--write", "{tmp}/p.json"], message=r"--run writes one folder"))
CASES.append(Case("base-fitted", "an in-situ profile as the base (its factors would compound), with --run",
                  argv=["insitu", "--run", "--base", "cpu-2core-epyc-insitu", "--out", "{tmp}/runs", "--write", "{tmp}/p.json"],
                  message=r"the base profile was itself fitted in situ"))
CASES.append(Case("base-gpu", "a GPU profile as the base (overheads overlap compute there)",
                  argv=["insitu", "--base", "h100-sxm", "--out", "{tmp}/runs", "--write", "{tmp}/p.json"],
                  message=r"overlaps overheads with compute"))


def _binary_base(tmp):
    (tmp / "base.json").write_bytes(bytes(range(256)))


CASES.append(Case("base-binary", "a binary file as --base (was a UnicodeDecodeError traceback)", setup=_binary_base,
                  argv=["insitu", "--base", "{tmp}/base.json", "--out", "{tmp}/runs", "--write", "{tmp}/p.json"],
                  message=r"hardware profile .*base\.json is not a text \(JSON\) file"))
CASES.append(Case("max-load-nan", "--max-load nan", argv=["insitu", "--run", "--max-load", "nan", "--write", "{tmp}/p.json"],
                  message=r"--max-load must be a finite number, got nan"))
