"""A framework's run script read the way bash would read its plain parts, without running anything: line
continuations joined, ``NAME=value`` / ``export NAME=value`` / ``NAME=(array)`` assignments recorded in order,
``$NAME``, ``${NAME}``, ``${NAME:-default}``, ``${NAME:=default}``, ``"${ARR[@]}"`` and integer ``$((...))``
expanded (an unset variable is empty, as in bash), then each command split into words by :mod:`shlex`.

Command substitutions (``$(...)``, backquotes) are never run: they expand to the word ``__not_run_command__`` so a value that depends on one
is refused by the importer's type check, naming the key; a probe written ``$(CMD && echo A || echo B)`` expands to
B (the probe taken as failing: verl's scripts probe for Ascend's ``torch_npu`` this way, and a GPU machine has none). Control structures (``if``/``for``/functions) are not
interpreted: their lines are read in order, which the importers' reports say. Written by hand because no library
expands shell variables without a shell (``shlex`` only splits words; ``os.path.expandvars`` has no defaults, arrays
or quoting rules).
"""

from __future__ import annotations

import ast
import fnmatch
import operator
import re
import shlex

from ...errors import RlmLabError

MAX_COMMANDS = 2000
MAX_EXPANDED = 1 << 20          # characters of one expanded command: bounded memory for a self-referencing script
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^(?:export\s+|local\s+|declare\s+(?:-\w+\s+)?|readonly\s+)?([A-Za-z_][A-Za-z0-9_]*)(\+?=)(.*)$",
                     re.S)
_KEYWORDS = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac", "function",
             "}", "{", "set", "unset", "echo", "cd", "mkdir", "source", ".", "trap", "wait", "exit", "return", "shift",
             "ulimit", "pip", "pip3", "wget", "git", "sleep", "printf", "nvidia-smi", "rm", "cp", "ln", "cat",
             "huggingface-cli", "hf", "shopt", "true", "false", "[", "[[", "test", "conda", "pkill", "kill", "ps"}
_CONTROL = {"|", "||", "&&", "&", ";", "|&"}   # a word that ends a command (a pipeline's next command follows)
_REDIRECT = re.compile(r"\d*(>>?|<|&>>?)(&\d+|&-)?(.*)")   # 2>&1, >log, > log, &> log: not an argument of the command
_NOWORD = "\x01"                # "${EMPTY[@]}" and "$@" expand to no word at all (bash), not to an empty one
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Div: operator.floordiv, ast.Mod: operator.mod, ast.USub: operator.neg}


def _arith(expr: str, env: dict) -> str:
    """``$((a * 8))``: integers, + - * / %, variables; anything else is left unexpanded (``<$((...))>``)."""
    expr = re.sub(r"\$?\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: str(env.get(m.group(1), "0") or "0"), expr)

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            return _OPS[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and type(n.op) in _OPS:
            return _OPS[type(n.op)](ev(n.operand))
        raise ValueError(expr)
    try:
        return str(ev(ast.parse(expr.replace("/", "//").replace("////", "//"), mode="eval")))
    except (ValueError, SyntaxError, ZeroDivisionError, TypeError):
        return "__unexpanded_arithmetic__"


def _closing(text: str, i: int, open_: str, close: str) -> int:
    depth = 0
    while i < len(text):
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def expand(text: str, env: dict, arrays: dict) -> str:
    """Expand variables in ``text`` (bash rules for the forms in the module docstring; single quotes protect).
    Values are re-quoted so that :func:`shlex.split` splits them as bash would: unquoted values into words,
    quoted ones as one word, array elements one word each."""
    out, i, quote = [], 0, None
    while i < len(text):
        c = text[i]
        if quote != '"' and c == "'" and (quote == "'" or True):
            j = text.find("'", i + 1) if quote is None else -1
            if quote is None and j >= 0:
                out.append(text[i:j + 1])
                i = j + 1
                continue
        if c == '"':
            quote = None if quote == '"' else '"'
            out.append(c)
            i += 1
            continue
        if c == "\\" and i + 1 < len(text):
            out.append(text[i:i + 2])
            i += 2
            continue
        if c == "`":
            j = text.find("`", i + 1)
            j = len(text) - 1 if j < 0 else j
            out.append(_word("__not_run_command__", quote))
            i = j + 1
            continue
        if c != "$" or i + 1 >= len(text):
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if text.startswith("$((", i):
            j = text.find("))", i + 3)
            j = len(text) - 2 if j < 0 else j
            out.append(_word(_arith(text[i + 3:j], env), quote))
            i = j + 2
        elif nxt == "(":
            j = _closing(text, i + 1, "(", ")")
            j = len(text) - 1 if j < 0 else j
            probe = re.fullmatch(r".*&&\s*echo\s+(\S+)\s*\|\|\s*echo\s+(\S+)\s*", text[i + 2:j], re.S)
            out.append(_word(probe.group(2).strip("'\"") if probe else "__not_run_command__", quote))
            i = j + 1
        elif nxt == "{":
            j = _closing(text, i + 1, "{", "}")
            if j < 0:
                raise RlmLabError(f"unclosed ${{ in {text[i:i + 40]!r}")
            out.append(_brace(text[i + 2:j], env, arrays, quote))
            i = j + 1
        elif nxt in "@*":
            out.append(_NOWORD if quote == '"' else "")   # the script's own arguments: none ("$@" is no word)
            i += 2
        elif nxt.isdigit() or nxt in "#?$!-":
            i += 2
        else:
            m = _NAME.match(text, i + 1)
            if not m:
                out.append(c)
                i += 1
                continue
            out.append(_word(env.get(m.group(0), ""), quote))
            i = m.end()
    return "".join(out)


def _word(value: str, quote) -> str:
    if quote == '"':
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
    return " ".join(shlex.quote(w) for w in value.split())


def _brace(body: str, env: dict, arrays: dict, quote) -> str:
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]", body)
    if m:
        items = arrays.get(m.group(1), [])
        if quote is None:
            return " ".join(shlex.quote(x) for x in items)
        if not items:
            return _NOWORD
        return '" "'.join(_word(x, quote) for x in items)      # "${a[@]}": one word per element
    m = re.fullmatch(r"#([A-Za-z_][A-Za-z0-9_]*)(\[[@*]\])?", body)
    if m:
        return str(len(arrays[m.group(1)]) if m.group(2) else len(env.get(m.group(1), "")))
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=+?])(.*))?", body, re.S)
    if not m:
        return _word("__unexpanded_variable__", quote)
    name, op, arg = m.groups()
    val = env.get(name)
    if op is None:
        return _word(val or "", quote)
    empty = val is None or (op.startswith(":") and val == "")
    if op.endswith("-"):
        return _word(_unquote(expand(arg, env, arrays)) if empty else val, quote)
    if op.endswith("="):
        if empty:
            env[name] = _unquote(expand(arg, env, arrays))
        return _word(env[name], quote)
    if op.endswith("+"):
        return _word("" if empty else _unquote(expand(arg, env, arrays)), quote)
    return _word(val or "", quote)


def _unquote(text: str) -> str:
    try:
        return " ".join(shlex.split(text))
    except ValueError:
        return text


def logical_lines(text: str) -> list[str]:
    """Lines with ``\\``-newline continuations joined, array literals spanning lines gathered into one, and a quoted
    string spanning lines (``JSON="{ ... }"``) kept whole, as bash reads them."""
    text = text.replace("\r\n", "\n").replace("\\\n", " ")
    out, pending = [], None
    for line in text.split("\n"):
        if pending is not None:
            pending += "\n" + line
            if _balanced(pending) and not _open_quote(pending):
                out.append(pending)
                pending = None
            continue
        if (re.match(r"^\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_]*\+?=\(", line) and not _balanced(line)) \
                or _open_quote(line):
            pending = line
            continue
        out.append(line)
    if pending is not None:
        out.append(pending)
    return out


def _open_quote(text: str) -> bool:
    """Whether ``text`` ends inside a quoted string (an unquoted ``#`` after a blank starts a comment)."""
    quote, i = None, 0
    while i < len(text):
        c = text[i]
        if c == "\\" and quote != "'":
            i += 2
            continue
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or text[i - 1].isspace()):
            nl = text.find("\n", i)
            if nl < 0:
                break
            i = nl
        i += 1
    return quote is not None


def _balanced(text: str) -> bool:
    body = re.sub(r"#[^\n]*", "", text)
    return body.count("(") <= body.count(")")


def _statements(lines: list[str]) -> list[str]:
    """Logical lines split at unquoted ``;`` (``;;`` kept as its own statement) and after ``then``/``do``/``else``."""
    out = []
    for line in lines:
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if re.match(r"^(?:export\s+)?[A-Za-z_][A-Za-z0-9_]*\+?=\(", s):
            out.append(s)
            continue
        cur, i, quote, depth = [], 0, None, 0
        while i < len(s):
            c = s[i]
            if quote:
                quote = None if c == quote else quote
            elif c in "'\"":
                quote = c
            elif c == "#" and (i == 0 or s[i - 1].isspace()):
                break
            elif c == "(":
                depth += 1
            elif c == ")" and depth:
                depth -= 1
            elif c == ";" and not depth:
                if "".join(cur).strip():
                    out.append("".join(cur).strip())
                cur = []
                if s.startswith(";;", i):
                    out.append(";;")
                    i += 1
                i += 1
                continue
            cur.append(c)
            i += 1
        if "".join(cur).strip():
            out.append("".join(cur).strip())
    res = []
    for st in out:          # "then cmd", "do cmd", "else cmd": the keyword apart from what follows it
        m = re.match(r"^(then|do|else)\s+(.+)$", st)
        res += [m.group(1), m.group(2)] if m else [st]
    return res


def _test(cond: str, env: dict, arrays: dict) -> bool:
    """``[ a = b ]``, ``[[ ... ]]``, ``-n``/``-z``, ``-eq``/``-ne``/``-gt``/``-lt``/``-ge``/``-le``, ``!``, joined by
    ``&&``/``||`` left to right; any other condition (a command's exit status) is false."""
    parts = re.split(r"\s*(&&|\|\|)\s*", cond.strip())
    value = _one_test(parts[0], env, arrays)
    for op, part in zip(parts[1::2], parts[2::2]):
        value = (value and _one_test(part, env, arrays)) if op == "&&" else (value or _one_test(part, env, arrays))
    return value


def _one_test(cond: str, env: dict, arrays: dict) -> bool:
    cond = cond.strip().strip("{}").strip().rstrip(";").strip()
    neg = cond.startswith("! ")
    cond = cond[2:].strip() if neg else cond
    m = re.fullmatch(r"\[\[?\s*(.*?)\s*\]\]?", cond, re.S)
    if not m:
        return neg
    try:
        w = shlex.split(expand(m.group(1), env, arrays))
    except ValueError:
        return neg
    r = False
    if len(w) == 1:
        r = bool(w[0])
    elif len(w) == 2 and w[0] in ("-n", "-z"):
        r = bool(w[1]) if w[0] == "-n" else not w[1]
    elif len(w) == 3 and w[1] in ("=", "==", "!="):
        r = fnmatch.fnmatchcase(w[0], w[2]) if w[1] != "!=" else not fnmatch.fnmatchcase(w[0], w[2])
    elif len(w) == 3 and w[1] in ("-eq", "-ne", "-gt", "-lt", "-ge", "-le"):
        try:
            a, b = int(w[0]), int(w[2])
        except ValueError:
            return neg
        r = {"-eq": a == b, "-ne": a != b, "-gt": a > b, "-lt": a < b, "-ge": a >= b, "-le": a <= b}[w[1]]
    return r != neg


_OPENERS = {"if": "fi", "case": "esac", "for": "done", "while": "done", "until": "done"}


def _pipeline(words: list[str]) -> list[list[str]]:
    """One split line's commands, as bash separates them: at ``|``, ``&&``, ``||``, ``;`` and ``&``, each without its
    redirections (``2>&1``, ``> log``, ``>log``): ``python3 -m main k=v 2>&1 | tee log`` is the command
    ``python3 -m main k=v`` and the command ``tee log``. (A quoted ``"|"`` reads the same here: no training command
    takes one as an argument.)"""
    cmds, cur, it = [], [], iter(words)
    for w in it:
        m = _REDIRECT.fullmatch(w)
        if w in _CONTROL:
            cmds.append(cur)
            cur = []
        elif m:
            if not m.group(2) and not m.group(3):
                next(it, None)           # "> FILE": the target is the next word
        else:
            cur.append(w)
    return [c for c in cmds + [cur] if c]


def commands(text: str, where: str) -> list[tuple[list[str], dict]]:
    """Every simple command the script runs, in order, as (words after expansion, variables at that point):
    assignments, ``if``/``elif``/``else`` on test conditions and ``case`` branches followed as bash would; loop and
    function bodies are not run (their commands are not collected)."""
    env: dict = {}
    arrays: dict = {}
    out: list = []
    st = _statements(logical_lines(text))

    def first(i):
        return st[i].split()[0] if i < len(st) and st[i].split() else ""

    def block(i: int, active: bool, stop: set) -> int:
        while i < len(st):
            w = first(i)
            if w in stop or st[i] in stop:
                return i
            if w == "if":
                i = _if(i, active)
            elif w == "case":
                i = _case(i, active)
            elif w in ("for", "while", "until"):
                i = block(_after_do(i + 1), False, {"done"}) + 1
            elif re.match(r"^(function\s+\w+|\w+\s*\(\s*\))\s*\{?$", st[i]):
                i = block(i + 1, False, {"}"}) + 1
            else:
                if active:
                    _simple(st[i])
                i += 1
        return i

    def _after_do(i):
        return i + 1 if i < len(st) and st[i] == "do" else i

    def _if(i, active):
        taken = False
        cond = st[i][2:]
        i += 1
        while True:
            if i < len(st) and st[i] == "then":
                i += 1
            run = active and not taken and (cond is None or _test(cond, env, arrays))
            taken = taken or run
            i = block(i, run, {"elif", "else", "fi"})
            if i >= len(st):
                raise RlmLabError(f"{where}: an if has no fi")
            w = first(i)
            if w == "fi":
                return i + 1
            cond = st[i][4:] if w == "elif" else None
            i += 1

    def _case(i, active):
        m = re.match(r"^case\s+(.*)\s+in$", st[i])
        if not m:
            raise RlmLabError(f"{where}: cannot read {st[i][:60]!r}")
        try:
            word = " ".join(shlex.split(expand(m.group(1), env, arrays)))
        except ValueError:
            word = ""
        i += 1
        taken = False

        while i < len(st) and st[i] != "esac":
            pm = re.match(r"^\(?\s*([^()]*?)\s*\)\s*(.*)$", st[i])
            if not pm:
                raise RlmLabError(f"{where}: cannot read the case branch {st[i][:60]!r}")
            pats = [p.strip().strip("'\"") for p in pm.group(1).split("|")]
            run = active and not taken and any(fnmatch.fnmatchcase(word, p) for p in pats)
            taken = taken or run
            rest = pm.group(2).strip()
            if rest and rest != ";;":
                st.insert(i + 1, rest)
            i = block(i + 1, run, {";;", "esac"})
            if i < len(st) and st[i] == ";;":
                i += 1
        return i + 1

    def _simple(s: str):
        m = _ASSIGN.match(s)
        if m and m.group(3).startswith("("):
            name, op, rhs = m.groups()
            body = rhs[1:rhs.rfind(")")] if ")" in rhs else rhs[1:]
            body = "\n".join(ln.split("#")[0] for ln in body.split("\n"))
            try:
                items = shlex.split(expand(body, env, arrays))
            except ValueError as e:
                raise RlmLabError(f"{where}: array {name} does not split as bash would ({e})") from None
            arrays[name] = (arrays.get(name, []) if op == "+=" else []) + items
            return
        expanded = expand(s, env, arrays)
        if len(expanded) > MAX_EXPANDED:
            raise RlmLabError(f"{where}: a command expands to more than {MAX_EXPANDED} characters; refused")
        try:
            words = shlex.split(expanded)
        except ValueError as e:
            raise RlmLabError(f"{where}: a line does not split as a shell line ({e}): {s[:60]!r}") from None
        words = [w.replace(_NOWORD, "") for w in words if w != _NOWORD]
        for words in _pipeline(words):
            if words and words[0] in ("export", "local", "readonly", "declare"):
                words = [w for w in words[1:] if not w.startswith("-")]
            while words and "=" in words[0] and _NAME.fullmatch(words[0].split("=", 1)[0].rstrip("+")):
                name, val = words.pop(0).split("=", 1)   # NAME=value [cmd]: a variable (or the command's environment)
                if name.endswith("+"):
                    name, val = name[:-1], env.get(name[:-1], "") + val
                env[name] = val
            if words and words[0] not in _KEYWORDS:
                out.append((words, dict(env)))
                if len(out) > MAX_COMMANDS:
                    raise RlmLabError(f"{where}: more than {MAX_COMMANDS} commands; not a run script")

    block(0, True, set())
    return out
