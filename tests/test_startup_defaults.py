"""Every WALSH_ setting has one default, in ``scrapy_walsh_research.settings.defaults``:
the reference documents each with that value, and no component reads a
setting with a default of its own (a literal, or a constant kept elsewhere),
so the docs and the code cannot drift apart again."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest
from scrapy.settings import Settings

from scrapy_walsh_research.settings import defaults
from scrapy_walsh_research.settings.options import RENAMED
from scrapy_walsh_research.settings.walsh import WalshSettings

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "scrapy_walsh_research"
REFERENCE = ROOT / "docs" / "reference.rst"

SETTINGS = {name: getattr(defaults, name) for name in dir(defaults) if name.startswith("WALSH_")}

#: Settings methods that take a default after the name, and the bundle's own
#: readers (``cache_size(settings, name, default)``, ``list_setting(settings, name)``).
READERS = {"get", "getbool", "getint", "getfloat", "getlist", "getdict", "getwithbase"}
OWN_READERS = {"cache_size", "list_setting"}


# -- the reference ------------------------------------------------------------------


def documented() -> dict[str, str]:
    """Each setting of the reference's settings table -> its default cell."""
    text = REFERENCE.read_text(encoding="utf-8")
    table = text.split("\nSettings\n--------\n", 1)[1].split("\n\n\n", 1)[0]
    cells: dict[str, str] = {}
    for row in table.split("\n   * - ")[1:]:
        name_cell, default_cell = row.split("\n     - ")[:2]
        names = re.findall(r"``(WALSH_[A-Z0-9_]+)``", name_cell)
        values = re.findall(r"``([^`]+)``", default_cell)
        for i, name in enumerate(names):
            # one row may document several settings, their defaults in order
            cells[name] = values[i] if len(names) > 1 else " ".join(default_cell.split())
    return cells


def matches(value: object, cell: str) -> bool:
    """Whether a default cell of the reference states *value*."""
    if value is None:
        return cell.startswith("unset")
    if isinstance(value, tuple):
        # list settings are documented as users write them: comma-separated
        return cell.startswith("none") if not value else cell.startswith(f"``{', '.join(value)}``")
    literal = re.match(r"``([^`]+)``", cell) if cell.startswith("``") else None
    shown = literal.group(1) if literal else cell
    if isinstance(value, bool):
        return shown == str(value)
    if isinstance(value, (int, float)):
        try:
            return float(shown) == value
        except ValueError:
            return False
    return shown == value


def test_every_default_is_documented_with_its_value():
    cells = documented()
    missing = sorted(set(SETTINGS) - set(cells))
    assert not missing, f"docs/reference.rst does not document {missing}"
    wrong = {
        name: (value, cells[name])
        for name, value in SETTINGS.items()
        if not matches(value, cells[name])
    }
    assert not wrong, f"docs/reference.rst states another default: {wrong}"


def test_every_documented_setting_has_a_default_here():
    assert sorted(set(documented()) - set(SETTINGS)) == []


@pytest.mark.parametrize(
    ("value", "cell", "ok"),
    [
        (1.0, "``1.0``", True),
        (86400.0, "``86400``", True),
        (0.010, "``0.010``", True),
        (2.0, "``1.0``", False),
        (None, "unset", True),
        (None, "``walsh``", False),
        ((), "none", True),
        (("tdm",), "``tdm``", True),
        (True, "``True``", True),
        (False, "``True``", False),
        ("walsh", "``walsh``", True),
        ("walsh", "``targets``", False),
    ],
)
def test_the_docs_check_tells_a_wrong_default_apart(value, cell, ok):
    assert matches(value, cell) is ok


# -- the code -----------------------------------------------------------------------


def _defaults_names(tree: ast.Module) -> tuple[set[str], dict[str, str]]:
    """Names bound to the defaults module, and names imported from it (local -> setting)."""
    modules: set[str] = set()
    constants: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "scrapy_walsh_research.settings":
            modules |= {a.asname or a.name for a in node.names if a.name == "defaults"}
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module == "scrapy_walsh_research.settings.defaults"
        ):
            constants.update({a.asname or a.name: a.name for a in node.names})
    return modules, constants


def _read_name(call: ast.Call) -> tuple[str, ast.expr | None] | None:
    """(setting, default expression or None) when *call* reads a WALSH_ setting."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in READERS | OWN_READERS:
        return None
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Constant) and str(arg.value).startswith("WALSH_"):
            rest = call.args[i + 1 : i + 2] or [
                k.value for k in call.keywords if k.arg == "default"
            ]
            return str(arg.value), (rest[0] if rest else None)
    return None


def reads(path: Path) -> list[tuple[int, str, ast.expr | None, bool]]:
    """Every read of a WALSH_ setting in *path*: (line, setting, default, whether the
    default comes from the defaults module). A fallback after ``or`` counts as a default."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules, constants = _defaults_names(tree)

    def from_defaults(expr: ast.expr, setting: str) -> bool:
        if isinstance(expr, ast.Constant) and expr.value is None:
            return SETTINGS.get(setting, ...) is None  # "or None": "" reads as unset
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            return expr.value.id in modules and expr.attr == setting
        return isinstance(expr, ast.Name) and constants.get(expr.id) == setting

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (read := _read_name(node)) and read[1] is not None:
            found.append((node.lineno, read[0], read[1], from_defaults(read[1], read[0])))
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            for i, value in enumerate(node.values):
                if isinstance(value, ast.Call) and (read := _read_name(value)):
                    for fallback in node.values[i + 1 :]:
                        ok = from_defaults(fallback, read[0])
                        found.append((fallback.lineno, read[0], fallback, ok))
    return sorted(found, key=lambda r: r[0])


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


#: the settings the typed object reads (field ``x`` is ``WALSH_X``)
TYPED = {f"WALSH_{f.name.upper()}": f.name for f in dataclasses.fields(WalshSettings)}


def test_every_setting_read_has_its_default_here():
    read = {
        found[0]
        for path in modules()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and (found := _read_name(node))
    }
    # the walk finds the reads (most are the start-up check's and the
    # typed settings' own; the components read the typed object)
    assert len(read) > 10
    read |= set(TYPED)  # and the typed settings' fields, read by their names
    # a renamed setting's 0.2.0 name is read only to honour it: its default
    # is the new name's (see the next test)
    assert sorted(read - set(SETTINGS) - set(RENAMED)) == []


def test_the_typed_settings_take_their_defaults_from_here():
    typed = WalshSettings.from_settings(Settings())
    assert {name: getattr(typed, field) for name, field in TYPED.items()} == {
        name: (tuple(SETTINGS[name]) if isinstance(SETTINGS[name], tuple) else SETTINGS[name])
        for name in TYPED
    }
    # and read what a project sets, by the field's name
    assert WalshSettings.from_settings(Settings({"WALSH_MIN_DELAY": "2.5"})).min_delay == 2.5


def test_a_renamed_setting_has_one_default_and_the_reference_names_both():
    text = REFERENCE.read_text(encoding="utf-8")
    section = text.split("\nRenamed settings\n----------------\n", 1)[1].split("\n\n\n", 1)[0]
    rows = section.split("\n   * - ")[1:]
    for old, new in RENAMED.items():
        assert new in SETTINGS and old not in SETTINGS
        assert any(f"``{old}``" in r and f"``{new}``" in r for r in rows), (old, new)


def test_no_setting_is_read_with_a_default_of_its_own():
    wrong = [
        f"{path.relative_to(PACKAGE)}:{line}: {setting} defaults to {ast.unparse(default)}"
        for path in modules()
        for line, setting, default, ok in reads(path)
        if not ok
    ]
    assert not wrong, (
        "read the default from scrapy_walsh_research.settings.defaults:\n" + "\n".join(wrong)
    )


def test_the_code_check_catches_a_literal_and_a_foreign_constant(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "from scrapy_walsh_research.settings import defaults\n"
        "from scrapy_walsh_research.settings.defaults import WALSH_RUN_INTERVAL as INTERVAL\n"
        "from elsewhere import DEFAULT_TTL\n"
        "a = settings.getfloat('WALSH_MIN_DELAY', 1.0)\n"
        "b = settings.getfloat('WALSH_POLICY_TTL', DEFAULT_TTL)\n"
        "c = settings.get('WALSH_REDIS_PREFIX') or 'walsh'\n"
        "d = cache_size(settings, 'WALSH_POLICY_CACHE_SIZE', 1000)\n"
        "e = settings.getfloat('WALSH_MIN_DELAY', defaults.WALSH_MAX_CRAWL_DELAY)\n"
        "f = settings.getfloat('WALSH_MIN_DELAY', defaults.WALSH_MIN_DELAY)\n"
        "g = settings.getfloat('WALSH_RUN_INTERVAL', INTERVAL)\n"
        "h = settings.get('WALSH_REDIS_URL')\n"
    )
    assert [(line, ok) for line, _, _, ok in reads(module)] == [
        (4, False),
        (5, False),
        (6, False),
        (7, False),
        (8, False),
        (9, True),
        (10, True),
    ]
