"""The docs are a map that stays true: links resolve and documented commands exist.

Every relative link in README.md, CONTRIBUTING.md and docs/*.md must reach a file (and, for
`#anchor`s, a heading of that file), and every `edgeapp ...` command line in them (fenced shell
blocks and inline code) must name a real command and only options its `--help` lists, with
choices it accepts. The options are read from the Click command tree the `edgeapp` command is
built from (`edgeapp.cli.app`), through Click's own `list_commands`/`get_command`, so a group
that builds its commands lazily is read the same way, and nothing runs 100 subprocesses.
"""

import enum
import re
import typing
from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple, Optional, Set, Tuple

import pytest
import typer
from conftest import ROOT

README_MAX_LINES = 300

# Pages other branches are writing; the index links them already. The lead removes each entry
# when its page lands on main (a link to a missing page outside this list fails).
PAGES_IN_FLIGHT = {
    "docs/onnx-and-pytorch.md",  # convert from ONNX and PyTorch
}

SHELL_FENCES = {"", "bash", "sh", "shell", "console", "shell-session"}
COMMAND_NAME = re.compile(r"^[a-z][a-z0-9-]*$")  # else a placeholder: MODEL, <task>, ...
CHOICE_VALUES = re.compile(r"^[a-z0-9][a-z0-9_.-]*(\|[a-z0-9][a-z0-9_.-]*)*$")
EDGEAPP = re.compile(r"(?<![\w./'\"\[$-])edgeapp(?=[ \t])")
COMMAND_PREFIXES = ("-m", "&&", "||", ";", "|", "(", "$", "sudo", "time", "exec", "xargs")
SHELL_COMMENT = re.compile(r"(^|\s)#.*$")
SHELL_END = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1"}
FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def doc_files() -> List[Path]:
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    return files + sorted((ROOT / "docs").glob("*.md"))


def rel(path: Path) -> str:
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:  # a page the checker's own tests write
        return path.name


# --- reading Markdown -------------------------------------------------------------------------------

class Block(NamedTuple):
    line: int  # 1-based line of the text's first line
    text: str


def split_markdown(text: str) -> Tuple[List[Block], List[Block], List[Block]]:
    """(shell code blocks, other code blocks, prose): fenced blocks apart, by their info string."""
    shell, other, prose = [], [], []
    lines = text.split("\n")
    i, start, buf = 0, 0, []
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            buf.append(lines[i])
            i += 1
            continue
        prose.append(Block(start + 1, "\n".join(buf)))
        fence, info, body_start = m.group(1), m.group(2).lower(), i + 1
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence[0] * len(fence)):
            i += 1
        block = Block(body_start + 1, "\n".join(lines[body_start:i]))
        (shell if info in SHELL_FENCES else other).append(block)
        i += 1
        start, buf = i, []
    prose.append(Block(start + 1, "\n".join(buf)))
    return shell, other, prose


def code_spans(block: Block) -> Iterator[Block]:
    for m in CODE_SPAN.finditer(block.text):
        yield Block(block.line + block.text.count("\n", 0, m.start()), m.group(2).strip())


def without_code_spans(text: str) -> str:
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower case, punctuation dropped."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> Set[str]:
    found: Set[str] = set()
    counts: Dict[str, int] = {}
    _, _, prose = split_markdown(path.read_text(encoding="utf-8"))
    for block in prose:
        for line in block.text.split("\n"):
            found.update(HTML_ANCHOR.findall(line))
            m = HEADING.match(line)
            if m:
                base = slug(m.group(2))
                n = counts.get(base, 0)
                counts[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
    return found


# --- links ------------------------------------------------------------------------------------------

def link_problems(path: Path) -> List[str]:
    problems = []
    _, _, prose = split_markdown(path.read_text(encoding="utf-8"))
    for block in prose:
        text = without_code_spans(block.text)
        for m in LINK.finditer(text):
            target = m.group(1)
            line = block.line + text.count("\n", 0, m.start())
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:, file:
                continue
            problem = check_link(path, target)
            if problem:
                problems.append(f"{rel(path)}:{line}: {target}: {problem}")
    return problems


def check_link(path: Path, target: str) -> Optional[str]:
    file_part, _, anchor = target.partition("#")
    dest = (path.parent / file_part).resolve() if file_part else path
    try:
        name = dest.relative_to(ROOT).as_posix()
    except ValueError:
        return "points outside the repository"
    if not dest.exists():
        return None if name in PAGES_IN_FLIGHT else "no such file"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"no heading #{anchor} in {name}"
    return None


# --- commands ---------------------------------------------------------------------------------------

class Found(NamedTuple):
    where: str
    command: str


def command_lines(path: Path) -> List[Found]:
    """Every `edgeapp ...` in the file's shell blocks (continuations joined) and inline code."""
    shell, _, prose = split_markdown(path.read_text(encoding="utf-8"))
    pieces = [Block(line.line, SHELL_COMMENT.sub("", line.text))
              for block in shell for line in logical_lines(block)]
    pieces += [span for block in prose for span in code_spans(block)]
    found = []
    for piece in sorted(pieces, key=lambda p: p.line):
        for m in EDGEAPP.finditer(piece.text):
            if not starts_a_command(piece.text[:m.start()]):
                continue  # `ruff check edgeapp tests`: the folder, not the command
            found.append(Found(f"{rel(path)}:{piece.line}", piece.text[m.end():].strip()))
    return found


def starts_a_command(before: str) -> bool:
    """Whether `edgeapp` after this text is run as a command (not an argument of another)."""
    before = before.rstrip()
    return (not before or before.endswith(COMMAND_PREFIXES)
            or re.search(r"(^|\s)[A-Z_][A-Z0-9_]*=\S*$", before) is not None)  # VAR=1 edgeapp


def logical_lines(block: Block) -> List[Block]:
    """A shell block's lines, each `\\`-continued line joined to the next."""
    out, physical, i = [], block.text.split("\n"), 0
    while i < len(physical):
        start, parts = i, [physical[i]]
        while parts[-1].rstrip().endswith("\\") and i + 1 < len(physical):
            parts[-1] = parts[-1].rstrip()[:-1]
            i += 1
            parts.append(physical[i])
        out.append(Block(block.line + start, " ".join(parts)))
        i += 1
    return out


def words(command: str) -> List[str]:
    """Shell words up to the end of this command (a pipe, `&&`, a comment), usage brackets kept."""
    out, depth = [], 0
    for word in command.split():
        if depth == 0 and (word in SHELL_END or word.startswith("#")):
            break
        depth += word.count("[") - word.count("]")
        out.append(word)
    return out


def cli_root():
    from edgeapp.cli.app import app

    return app if hasattr(app, "list_commands") else typer.main.get_command(app)


def options_of(command) -> Dict[str, object]:
    """The options `--help` lists (hidden ones are for the tests, not for the docs)."""
    table = {"--help": None, "-h": None}
    for param in command.params:
        if param.param_type_name == "option" and not getattr(param, "hidden", False):
            for name in list(param.opts) + list(param.secondary_opts):
                table[name] = param
    return table


def choices_of(param) -> Optional[List[str]]:
    """The values a choice option takes (Click's Choice, or the Enum Typer makes one from)."""
    kind = getattr(param, "type", None)
    if getattr(kind, "choices", None):
        return [str(getattr(c, "value", c)) for c in kind.choices]
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    for candidate in (annotation,) + tuple(typing.get_args(annotation) if annotation else ()):
        if isinstance(candidate, type) and issubclass(candidate, enum.Enum):
            return [str(e.value) for e in candidate]
    return None


def takes_value(param) -> bool:
    return param is not None and not param.is_flag and not getattr(param, "count", False)


def bare(word: str) -> str:
    return word.strip("[](),'\"`")


def check_command(root, command: str) -> Optional[str]:
    """None when `edgeapp <command>` uses only real commands, options and choices."""
    current, path, items = root, "edgeapp", words(command)
    ctx = typer.Context(root, info_name="edgeapp")
    i = 0
    while i < len(items):
        word = bare(items[i])
        if hasattr(current, "list_commands") and not word.startswith("-"):
            if not COMMAND_NAME.match(word):
                return None  # a placeholder (MODEL, <task>, ...): nothing more to check
            sub = current.get_command(ctx, word)
            if sub is None:
                return f"`{path} {word}`: no such command (have: {', '.join(current.list_commands(ctx))})"
            current, path = sub, f"{path} {word}"
            ctx = typer.Context(sub, parent=ctx, info_name=word)
            i += 1
            continue
        problem, i = _check_option(current, path, items, i)
        if problem:
            return problem
    return None


def _check_option(command, path: str, items: List[str], i: int) -> Tuple[Optional[str], int]:
    word = bare(items[i])
    if not word.startswith("-") or word == "-" or re.match(r"^-\d", word) or word.startswith("-..."):
        return None, i + 1
    known = options_of(command)
    name, eq, value = word.partition("=")
    for alternative in name.split("/"):  # --edgetpu/--cpu-only
        if alternative.startswith("-") and alternative not in known:
            return f"`{path}` has no option {alternative}", i + 1
    param = known.get(name)
    if not takes_value(param):
        return None, i + 1
    if not eq:
        if i + 1 >= len(items):
            return None, i + 1
        value, i = items[i + 1], i + 1
    value = bare(value)
    allowed = choices_of(param)
    if allowed and CHOICE_VALUES.match(value):
        wrong = [v for v in value.split("|") if v not in allowed]
        if wrong:
            return f"`{path} {name}` takes {', '.join(allowed)}, not {', '.join(wrong)}", i + 1
    return None, i + 1


# --- the tests --------------------------------------------------------------------------------------

def test_readme_is_a_map_not_a_manual():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move details to docs/"


def test_every_page_is_in_the_index():
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    linked = {(ROOT / "docs" / m.group(1).split("#")[0]).resolve()
              for m in LINK.finditer(without_code_spans(index))}
    missing = [rel(p) for p in sorted((ROOT / "docs").glob("*.md"))
               if p.name != "README.md" and p.resolve() not in linked]
    assert not missing, f"pages the index (docs/README.md) does not link: {missing}"


def test_pages_in_flight_are_still_missing():
    """The allowance is only for pages not on this branch yet: once one lands, its links count."""
    landed = sorted(name for name in PAGES_IN_FLIGHT if (ROOT / name).exists())
    assert not landed, f"remove {landed} from PAGES_IN_FLIGHT in tests/test_docs.py"


@pytest.mark.parametrize("path", doc_files(), ids=rel)
def test_relative_links_resolve(path):
    problems = link_problems(path)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", doc_files(), ids=rel)
def test_documented_commands_exist_with_their_options(path):
    root = cli_root()
    problems = [f"{f.where}: edgeapp {f.command}\n    {p}"
                for f in command_lines(path) for p in [check_command(root, f.command)] if p]
    assert not problems, "\n".join(problems)


def test_the_docs_show_commands_of_every_kind():
    """The extraction finds what is there: guards against a parser that silently finds nothing."""
    found = [f for path in doc_files() for f in command_lines(path)]
    root = cli_root()
    ctx = typer.Context(root, info_name="edgeapp")
    named = {bare(words(f.command)[0]) for f in found if words(f.command)}
    assert len(found) > 60 and set(root.list_commands(ctx)) <= named, sorted(named)


# --- the checker itself can fail --------------------------------------------------------------------

@pytest.mark.parametrize("command, problem", [
    ("classify MODEL photos/ --top-k 3 -f csv --output out.csv --resume", None),
    ("classify MODEL photos/ --no-such-option", "has no option --no-such-option"),
    ("clasify MODEL photos/", "no such command"),
    ("classify MODEL x [--format table|jsonl|xml]", "not xml"),
    ("models pull NAME... [--edgetpu/--cpu-only]", None),
    ("models pull NAME [--edgetpu/--gpu-only]", "has no option --gpu-only"),
    ("models fetch NAME", "`edgeapp models fetch`: no such command"),
    ("--device usb classify MODEL x", None),
    ("--device usb clasify MODEL x", "no such command"),
    ("<task> -f jsonl", None),
    ("camera MODEL [--serve [HOST:]PORT [--serve-token TOKEN|none | --serve-token-file FILE]]", None),
    ("classify MODEL - < list.txt | grep cat --no-such", None),  # grep's option, not ours
    ("camera MODEL --serve 8080   # a comment --not-an-option", None),
])
def test_the_command_check_catches_mistakes(command, problem):
    result = check_command(cli_root(), command)
    if problem is None:
        assert result is None, result
    else:
        assert result and problem in result, result


def test_commands_are_found_in_blocks_spans_and_continuations(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Run `edgeapp devices --format\n  json` here.\n\n```bash\n"
                    "python -m edgeapp classify M x \\\n    --top-k 2\npip install ./edgeapp\n```\n\n"
                    "```python\nedgeapp.open_model('m')\n```\n\n```text\nedgeapp: error: x\n```\n",
                    encoding="utf-8")
    found = command_lines(page)
    assert [(f.where, " ".join(f.command.split())) for f in found] == [
        ("page.md:1", "devices --format json"), ("page.md:5", "classify M x --top-k 2")]


def test_links_to_missing_files_and_headings_fail():
    page = ROOT / "docs" / "README.md"
    assert check_link(page, "exit-codes.md#no-such-heading") == \
        "no heading #no-such-heading in docs/exit-codes.md"
    assert check_link(page, "no-such-page.md") == "no such file"
    assert check_link(page, "compiler.md") is None
    assert slug("A headless camera you can watch: `--serve`, and results to MQTT: `--mqtt`") == \
        "a-headless-camera-you-can-watch---serve-and-results-to-mqtt---mqtt"


def test_choices_are_read_from_the_real_options():
    root = cli_root()
    ctx = typer.Context(root, info_name="edgeapp")
    classify = root.get_command(ctx, "classify")
    assert choices_of(options_of(classify)["--format"]) == ["table", "jsonl", "csv"]
