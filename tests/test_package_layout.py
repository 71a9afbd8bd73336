"""The package's shape: a layout that shows the architecture and stays that
way (``docs/architecture.rst``). The public API is the component paths users
write in settings, exported from the package root; the pure core loads no
Scrapy; each concern has one owner. (Import cycles and layers:
``lint-imports`` in CI.)"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "scrapy_walsh_research"

#: the paths the README and docs tell users to write in settings
PUBLIC_PATHS = sorted(
    {
        path
        for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.rst"))]
        for path in re.findall(
            r"scrapy_walsh_research\.(?:[a-z_]+\.)*[A-Z][A-Za-z0-9]+", doc.read_text()
        )
    }
)


#: the top level of the package, by kind (docs/architecture.rst draws it)
TOP_LEVEL = {
    "__init__.py", "_moved.py", "addon.py", "components.py", "errors.py", "per_crawler.py",
    "records.py", "py.typed",
    "_runtime", "commands", "conformance", "core", "documents", "evidence", "extensions", "gates",
    "identity", "sandbox", "scheduling", "settings", "spiders", "state",
}  # fmt: skip


def test_the_top_level_groups_components_by_kind():
    found = {p.name for p in PACKAGE.iterdir() if p.name != "__pycache__"}
    assert found == TOP_LEVEL


def test_every_gate_is_a_module_of_gates_and_the_scheduling_side_imports_none():
    from scrapy.utils.misc import load_object

    from scrapy_walsh_research import components

    for path in [*components.DOWNLOADER_MIDDLEWARES, *components.SPIDER_MIDDLEWARES]:
        assert load_object(path).__module__.startswith("scrapy_walsh_research.gates."), path
    for path in (components.FRONTIER, components.WIRE_HANDLER):
        assert load_object(path).__module__.startswith("scrapy_walsh_research.scheduling."), path
    for path in (PACKAGE / "scheduling").glob("*.py"):
        imported = {
            n.module or ""
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.ImportFrom)
        }
        assert not {m for m in imported if m.startswith("scrapy_walsh_research.gates")}, path


def test_gates_holds_gates_and_what_the_document_gates_share_is_in_documents():
    from scrapy.utils.misc import load_object

    from scrapy_walsh_research import components

    gates = {
        load_object(path).__module__
        for path in [*components.DOWNLOADER_MIDDLEWARES, *components.SPIDER_MIDDLEWARES]
    }
    modules = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in (PACKAGE / "gates").rglob("*.py")
        if p.name != "__init__.py"
    }
    # the base of the document gates, beside the gates built on it
    bases = {"origin_documents"}
    assert modules - gates == {f"scrapy_walsh_research.gates.{m}" for m in bases}


def test_the_root_exports_every_component_path_users_write():
    from scrapy.utils.misc import load_object

    import scrapy_walsh_research
    from scrapy_walsh_research import components

    assert set(components.PUBLIC) == {
        f"scrapy_walsh_research.{n}" for n in scrapy_walsh_research.EXPORTS
    }
    assert set(scrapy_walsh_research.EXPORTS) <= set(scrapy_walsh_research.__all__)
    for path in components.PUBLIC:
        component = load_object(path)
        assert components.name_of(component) == path
        assert component.__module__ == scrapy_walsh_research.EXPORTS[path.rpartition(".")[2]] or (
            path.endswith(".BlocklistMiddleware")  # defined in gates.blocklist.middleware
        ), path


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text())) for p in sorted(PACKAGE.rglob("*.py"))]


def test_every_request_meta_key_is_defined_in_one_module():
    defined = {}
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.endswith("_META"):
                        defined.setdefault(target.id, []).append(path.relative_to(PACKAGE))
    assert len(defined) >= 14, defined
    meta = Path("_runtime/meta.py")
    assert {k: v for k, v in defined.items() if v != [meta]} == {}
    # and no other module spells a key out instead of naming it
    from scrapy_walsh_research._runtime import meta as meta_keys

    keys = {v for k, v in vars(meta_keys).items() if k.endswith("_META")}
    spelled = {
        str(path.relative_to(PACKAGE)): keys
        & {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
        for path, tree in _modules()
        if path.relative_to(PACKAGE) != meta
    }
    assert {p: k for p, k in spelled.items() if k} == {}


def _names(node: ast.expr, name: str) -> bool:
    """Whether *node* is ``name`` or ``<anything>.name``."""
    return (isinstance(node, ast.Name) and node.id == name) or (
        isinstance(node, ast.Attribute) and node.attr == name
    )


def test_components_ask_each_other_through_declared_interfaces():
    """What a spider offers and what another component knows are asked of
    the crawler's context (``_runtime/context.py``), through the interfaces
    declared there: a spider's capability is never read by name
    (``getattr``/``hasattr`` on a spider), nor a component looked up from
    another (``X.of(crawler)``, ``x_of(crawler)``), so the wiring at run time
    reads like the import graph."""
    found = []
    for path, tree in _modules():
        where = path.relative_to(PACKAGE)
        for node in ast.walk(tree):
            # a lookup by crawler: X.of(crawler), or x_of(crawler) (the engine's
            # own parts, found through Scrapy's API, are not the bundle's components)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                node.name == "of" or node.name.endswith("_of")
            ):
                params = [a.arg for a in node.args.args if a.arg != "cls"]
                if params[:1] == ["crawler"] and where != Path("scheduling/_engine.py"):
                    found.append(f"{where}:{node.lineno} defines a lookup {node.name}(crawler)")
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func, first = node.func, node.args[0]
            if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr"):
                on_spider = _names(first, "spider") or (
                    where.parts[0] == "spiders" and _names(first, "self")
                )
                if on_spider:
                    found.append(f"{where}:{node.lineno} {func.id} on a spider")
            if isinstance(func, ast.Attribute) and func.attr == "of" and _names(first, "crawler"):
                found.append(f"{where}:{node.lineno} looks a component up with .of(crawler)")
    assert found == []


#: the calls that find a crawler's shared service from the crawler itself
LOOKUPS = {
    "per_crawler", "state_for", "local_state_for", "redis_for", "for_crawler", "settings_for",
}  # fmt: skip


def _lookup_modules() -> dict[str, list[int]]:
    """Each module that looks a per-crawler service up itself, with the lines."""
    found: dict[str, list[int]] = {}
    for path, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in LOOKUPS:
                found.setdefault(str(path.relative_to(PACKAGE)), []).append(node.lineno)
    return found


def test_per_crawler_services_are_looked_up_in_a_few_modules_only():
    """The crawler's context owns its shared services (the stores, the marks,
    the audit trail, the Pacer, ...): a component asks ``self.context``
    (``_runtime/context.py: InContext``) and never looks one up itself, so
    the lookups stay in the few modules that build them."""
    found = _lookup_modules()
    assert "_runtime/context.py" in found  # the measure still sees the lookups
    assert len(found) <= 6, found


#: what reads a setting by name: Scrapy's getters, and the bundle's helpers
#: that read the name they are given
SETTING_READS = {
    "get", "getbool", "getint", "getfloat", "getlist", "getdict",
    "cache_size", "list_setting", "seconds", "_positive", "name_in_use",
}  # fmt: skip


def _raw_walsh_reads() -> dict[str, list[int]]:
    """Each module outside ``settings/`` that reads a ``WALSH_`` setting by its
    name (a literal, or a constant holding it), with the lines."""
    found: dict[str, list[int]] = {}
    for path, tree in _modules():
        where = path.relative_to(PACKAGE)
        if where.parts[0] == "settings":
            continue
        named = {  # NAME = "WALSH_..." constants of the module
            t.id
            for n in ast.walk(tree)
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
            for t in n.targets
            if isinstance(t, ast.Name) and str(n.value.value).startswith("WALSH_")
        }

        def walsh(node: ast.expr, named: set[str] = named) -> bool:
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                return re.fullmatch(r"WALSH_[A-Z0-9_]+", node.value) is not None
            return isinstance(node, ast.Name) and node.id in named

        for node in ast.walk(tree):
            read = (
                isinstance(node, ast.Call)
                and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
                in SETTING_READS
                and any(walsh(a) for a in node.args[:2])
            ) or (
                # settings["WALSH_..."], not os.environ["WALSH_..."] (an environment variable)
                isinstance(node, ast.Subscript)
                and walsh(node.slice)
                and not _names(node.value, "environ")
            )
            if read:
                found.setdefault(str(where), []).append(node.lineno)
    return found


#: the modules outside settings/ that read WALSH_ settings raw, and why: each
#: describes a project's settings as given, a configuration the start-up
#: check refuses included (the attestation reports the refusal; the
#: conformance run has every row fail with it), so neither can take the
#: validated, typed object. Everything else reads ``WalshSettings``
#: (``settings/walsh.py``): components through ``context.settings``, the
#: commands from their settings, the state stores as ``state.factory`` hands
#: it down. A third module fails the test below.
RAW_READ_MODULES = {"conformance/run.py", "evidence/attestation.py"}


def test_walsh_settings_are_read_raw_in_a_few_modules_only():
    found = _raw_walsh_reads()
    assert len(RAW_READ_MODULES) <= 2
    assert sorted(set(found) - RAW_READ_MODULES) == [], sorted(found)


#: the modules outside settings/ that refuse a WALSH_ setting, and why: the
#: machine refuses it, not the value (the state dir cannot be created, or
#: another crawl holds it; redis-py cannot parse the URL as it connects).
#: Every check of a value is in ``settings/values.py``, run as the typed
#: settings are read, so no component is handed a value it must refuse.
REFUSING_MODULES = {"state/directory.py", "state/redis/connection.py"}


def _value_refusals() -> dict[str, list[int]]:
    """Each module outside ``settings/`` that raises a configuration error
    naming a ``WALSH_`` value (``WALSH_X=...``, or ``{name}=...`` that
    mentions one), with the lines."""
    found: dict[str, list[int]] = {}
    for path, tree in _modules():
        where = path.relative_to(PACKAGE)
        if where.parts[0] == "settings":
            continue
        for node in ast.walk(tree):
            call = node.exc if isinstance(node, ast.Raise) else None
            if not (isinstance(call, ast.Call) and _names(call.func, "WalshConfigurationError")):
                continue
            message = call.args[0] if call.args else None
            parts = message.values if isinstance(message, ast.JoinedStr) else [message]
            text = "".join(
                str(p.value) if isinstance(p, ast.Constant) else "{}" for p in parts if p
            )
            if re.search(r"WALSH_[A-Z0-9_]+=", text) or (
                text.startswith("{}=") and "WALSH_" in text
            ):
                found.setdefault(str(where), []).append(node.lineno)
    return found


def test_walsh_values_are_checked_in_settings_only():
    found = _value_refusals()
    assert "state/directory.py" in found  # the measure still sees a refusal
    assert sorted(set(found) - REFUSING_MODULES) == [], found


def test_the_raw_read_measure_sees_every_way_of_reading_a_setting(tmp_path, monkeypatch):
    """A getter by literal or by constant, a subscript, a bundle helper:
    each counts; an environment variable does not."""
    module = tmp_path / "pkg" / "gates" / "m.py"
    module.parent.mkdir(parents=True)
    module.write_text(
        "import os\n"
        "NAME = 'WALSH_MIN_DELAY'\n"
        "a = settings.getfloat('WALSH_MIN_DELAY', 1.0)\n"
        "b = settings.get(NAME)\n"
        "c = settings['WALSH_REDIS_URL']\n"
        "d = cache_size(settings, 'WALSH_POLICY_CACHE_SIZE', 1)\n"
        "os.environ['WALSH_WORKER_INDEX'] = '1'\n"
    )
    (tmp_path / "pkg" / "settings").mkdir()
    (tmp_path / "pkg" / "settings" / "s.py").write_text("x = settings.get('WALSH_X')\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "pkg")
    assert {m: sorted(lines) for m, lines in _raw_walsh_reads().items()} == {
        "gates/m.py": [3, 4, 5, 6]
    }


def test_what_the_audit_trail_carries_is_declared_to_it_not_set_on_it():
    """The components tell the audit trail what is in force through its
    declared facts (``evidence/audit.py: AuditFacts``); none assigns an
    attribute of the trail from outside."""
    found = []
    for path, tree in _modules():
        where = path.relative_to(PACKAGE)
        if where.parts[0] == "evidence":
            continue
        for node in ast.walk(tree):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else ([node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            )
            for target in targets:
                if isinstance(target, ast.Attribute) and any(
                    _names(target.value, name) for name in ("audit", "_audit", "trail")
                ):
                    found.append(f"{where}:{node.lineno} sets {ast.unparse(target)}")
    assert found == []


def test_the_scheduler_is_asked_through_its_declared_interface():
    """What the frontier holds is asked through its ``WaitingTargets`` (the
    crawler's context), not found by probing the engine's scheduler for a
    method (``getattr(scheduler, ...)``); the gates offer what they would
    deny (``WouldDeny``) instead of registering callbacks on the Pacer."""
    found = []
    for path, tree in _modules():
        where = path.relative_to(PACKAGE)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr") and node.args:
                if _names(node.args[0], "scheduler"):
                    found.append(f"{where}:{node.lineno} {func.id} on a scheduler")
            if isinstance(func, ast.Attribute) and func.attr.startswith(
                ("add_denial", "add_warmer")
            ):
                found.append(f"{where}:{node.lineno} registers a callback on the Pacer")
    assert found == []


def test_retry_after_is_parsed_in_one_place_and_a_hold_written_by_one_gate():
    parse = [p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py")
             if "parse_retry_after(" in p.read_text()]  # fmt: skip
    assert sorted(map(str, parse)) == ["core/retry_after.py", "scheduling/backoff.py"]
    holds = [p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py")
             if "pacer.hold(" in p.read_text()]  # fmt: skip
    assert [str(p) for p in holds] == ["gates/pacing.py"]


def test_a_state_namespace_more_than_one_module_names_is_named_once():
    from scrapy_walsh_research._runtime.marks import PURPOSES
    from scrapy_walsh_research.state import namespaces

    names = {v for k, v in vars(namespaces).items() if k.isupper() and isinstance(v, str)}
    # robots.txt's and tdmrep.json's answers are kept under the names their
    # requests' purposes (and kinds, stats, audit entries) have: those words
    # are written where the purposes are
    names -= PURPOSES
    for path, tree in _modules():
        if path.name == "namespaces.py":
            continue
        literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
        assert not names & literals, (path.relative_to(PACKAGE), names & literals)


def test_the_docs_name_the_component_paths_users_write():
    # the gates, the scheduler, the download handler, the pipeline, the addon
    assert len(PUBLIC_PATHS) >= 15, PUBLIC_PATHS


@pytest.mark.parametrize("path", PUBLIC_PATHS)
def test_every_component_path_the_docs_give_is_importable(path):
    module, _, name = path.rpartition(".")
    assert hasattr(importlib.import_module(module), name), path


def _between(path: Path, start: str, end: str) -> str:
    text = path.read_text()
    begin = text.index(start)
    return text[begin : text.index(end, begin)]


#: where the gate chain is described, and how each description names a gate:
#: the prose by the labels of ``components.GATE_LABELS``, the diagrams by class
CHAIN_DESCRIPTIONS = {
    "the package's docstring": (
        lambda: ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text())) or "",
        "label",
    ),
    "the gates' docstring": (
        lambda: ast.get_docstring(ast.parse((PACKAGE / "gates" / "__init__.py").read_text())) or "",
        "label",
    ),
    "README.md": (
        lambda: _between(ROOT / "README.md", "Before every request", "\n```\n\n"),
        "label",
    ),
    "docs/gates.rst": (
        lambda: _between(ROOT / "docs" / "gates.rst", "targets spider", "The scheduler is"),
        "class",
    ),
    "docs/architecture.rst": (
        lambda: _between(
            ROOT / "docs" / "architecture.rst", "Out, a declared target", "A gate that denies"
        ),
        "class",
    ),
}


def _chain_faults(text: str, naming: str) -> list[str]:
    """What a description of the chain gets wrong against the component
    table: a gate it leaves out, or one named before a gate that precedes it."""
    from scrapy_walsh_research import components

    chain = sorted(components.DOWNLOADER_MIDDLEWARES, key=components.DOWNLOADER_MIDDLEWARES.get)
    assert set(components.GATE_LABELS) == set(chain)  # every gate has its label
    flat = " ".join(text.split())
    names = [
        components.GATE_LABELS[path] if naming == "label" else path.rpartition(".")[2]
        for path in chain
    ]
    at = {name: m.start() for name in names if (m := re.search(rf"\b{re.escape(name)}\b", flat))}
    faults = [f"leaves out {name!r}" for name in names if name not in at]
    said = sorted(at, key=at.__getitem__)
    expected = [name for name in names if name in said]
    if said != expected:
        faults.append(f"names {said}, the chain is {expected}")
    return faults


@pytest.mark.parametrize("where", sorted(CHAIN_DESCRIPTIONS))
def test_every_description_of_the_chain_names_every_gate_in_the_chain_order(where):
    describe, naming = CHAIN_DESCRIPTIONS[where]
    assert _chain_faults(describe(), naming) == []


def test_a_description_leaving_a_gate_out_or_misordering_one_is_caught():
    from scrapy_walsh_research.components import GATE_LABELS, SITEMAPS_MW, VALIDATORS_MW

    chain = " -> ".join(GATE_LABELS.values())
    assert _chain_faults(chain, "label") == []
    sitemaps, validators = GATE_LABELS[SITEMAPS_MW], GATE_LABELS[VALIDATORS_MW]
    left_out = chain.replace(f"{sitemaps} -> ", "")
    assert _chain_faults(left_out, "label") == [f"leaves out {sitemaps!r}"]
    swapped = chain.replace(sitemaps, "@").replace(validators, sitemaps).replace("@", validators)
    assert len(_chain_faults(swapped, "label")) == 1


def test_the_pure_core_loads_neither_scrapy_nor_twisted():
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in (PACKAGE / "core").rglob("[!_]*.py")
    )
    assert "scrapy_walsh_research.core.blocklist.child" in modules  # subpackages too
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('scrapy', 'twisted'))\n"
        + "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "", out.stdout


def test_no_module_grows_past_the_size_a_reader_takes_in():
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")
    }
    # about 500 lines; the largest today are the targets spider (530), the
    # start-up check (539) and the Redis scripts (Lua text, 526)
    assert {p: n for p, n in sizes.items() if n > 540} == {}


def test_no_function_grows_long_without_saying_why():
    """Over about 80 lines, a function says in its docstring or first
    comment why it is long (a flat list of checks, a page written in
    order)."""
    long = []
    for path in PACKAGE.rglob("*.py"):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if node.end_lineno is None or node.end_lineno - node.lineno + 1 <= 80:
                continue
            head = "\n".join(lines[node.lineno - 1 : node.lineno + 15]).lower()
            if "long" not in head:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert long == []


def test_no_issue_number_is_left_for_a_reader_to_look_up():
    """Code, tests and docs say why in words: a reader has no tracker."""
    texts = [
        *PACKAGE.rglob("*.py"),
        *(ROOT / "tests").rglob("*.py"),
        *(ROOT / "docs").glob("*.rst"),
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
    ]
    found = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in texts
        for m in re.finditer(r"\bissues? #?\d+", p.read_text(), re.I)
    ]
    assert found == []
