"""The house's rules, checked on the source: no import circles among the product's modules, knowledge
imports nothing from ledger, stateboard imports no app, support code (ledger/ops/) reached only from the
commands, the services' layers, one way into the services, no product module over 500 lines, no second
request pipeline, pages name their authorizers only in their policies (docs/architecture.md)."""

import ast
import functools
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ledger", "knowledge", "stateboard")
MAX_LINES = 500


@functools.cache
def product_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def imports_of(name: str, path: Path, *, module_level: bool = True) -> set[str]:
    """The product modules ``name`` imports (at module level only, unless told otherwise)."""
    modules = product_modules()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = ast.parse(path.read_text()).body if module_level else list(ast.walk(ast.parse(path.read_text())))
    found = set()
    for node in nodes:
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            # ``from package import module`` needs the module, not what the package's __init__ re-exports
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_no_import_circles():
    """Not even through an import inside a function, nor through a package's facade (``ledger.services``)."""
    graph = {name: imports_of(name, path, module_level=False) for name, path in product_modules().items()}
    circles, state = [], {}

    def visit(node, trail):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                circles.append(trail[trail.index(nxt):] + [nxt] if nxt in trail else [node, nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not circles, "\n".join(" -> ".join(c) for c in circles[:5])


@pytest.mark.parametrize(("package", "forbidden"), [("knowledge", ("ledger",)),
                                                     ("stateboard", ("ledger", "knowledge"))])
def test_lower_packages_import_nothing_from_higher_ones(package, forbidden):
    """knowledge reaches ledger's facts through its port; stateboard imports no app (not even in a function)."""
    offending = [f"{name} imports {target}" for name, path in product_modules().items()
                 if name.split(".")[0] == package
                 for target in imports_of(name, path, module_level=False) if target.split(".")[0] in forbidden]
    assert not offending, "\n".join(offending)


def test_the_services_are_reached_through_their_facade():
    """Outside ledger/services/ a verb is imported one way: from ``ledger.services``, which re-exports each."""
    offending = [f"{name} imports {target}" for name, path in product_modules().items()
                 if not name.startswith("ledger.services")
                 for target in imports_of(name, path, module_level=False) if target.startswith("ledger.services.")]
    assert not offending, "\n".join(offending)


def test_the_services_import_only_layers_to_their_left():
    """The one order of the services' modules is docs/architecture.md's line; each imports only earlier layers."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    line = re.search(r"Inside `ledger/services/`.*?reads them here\):\n(.*?)\.\n", text, re.S)
    assert line, "docs/architecture.md: the services' layers are missing"
    layers = [re.findall(r"`(\w+)`", part) for part in re.split(r"\s<\s", line.group(1))]
    layer_of = {module: n for n, names in enumerate(layers) for module in names}
    services = {name.rpartition(".")[2]: path for name, path in product_modules().items()
                if name.startswith("ledger.services.")}
    assert set(layer_of) == set(services), set(layer_of) ^ set(services)
    wrong = [f"{module} ({layer_of[module]}) imports {target} ({layer_of[target]})"
             for module, path in services.items()
             for target in (name.rpartition(".")[2] for name in imports_of(f"ledger.services.{module}", path,
                                                                               module_level=False)
                            if name.startswith("ledger.services."))
             if layer_of[target] >= layer_of[module]]
    assert not wrong, wrong


def test_nothing_points_outside_the_repository():
    """A clone holds the repository alone: no document, setting or module names a path beside it."""
    outside = "../" + "shared"
    files = [*ROOT.glob("docs/*.md"), ROOT / "README.md", ROOT / "pyproject.toml", ROOT / ".ci" / "run",
             *(p for package in (*PACKAGES, "tests") for p in (ROOT / package).rglob("*.py"))]
    found = [str(path.relative_to(ROOT)) for path in files if outside in path.read_text()]
    assert not found, found


def test_support_code_is_reached_only_from_its_commands():
    """``ledger/ops/`` holds support code (the bench, the demo): only management commands import it; what the
    services and the processes run lives in packages of its own (ledger/executor/, ledger/schedules/, …)."""
    offending = [f"{name} imports {target}" for name, path in product_modules().items()
                 if not name.startswith(("ledger.ops", "ledger.management.commands"))
                 for target in imports_of(name, path, module_level=False) if target.startswith("ledger.ops")]
    assert not offending, "\n".join(offending)


def test_the_task_names_persisted_are_registered():
    """Beat's rows (django-celery-beat's ``PeriodicTask.task``) and the outbox's rows name tasks by the dotted
    name Celery derives from the module: a task whose module moves keeps its old name (``name=``)."""
    from ledger.schedules import SWEEPS
    from ledger.schedules.beat import FIRE_TASK
    from ledger.services.outbox import CHAT_TASK, EXECUTOR_TASK
    from stateboard.celery import app

    app.loader.import_default_modules()
    persisted = {task for task, _ in SWEEPS.values()} | {FIRE_TASK, EXECUTOR_TASK, CHAT_TASK}
    assert not persisted - set(app.tasks), persisted - set(app.tasks)


def test_the_tests_take_redis_from_the_one_setting():
    """Tests reach the machine's Redis only at ``REDIS_URL`` (its default is in tests/settings.py): a worker
    listening on another database than the one this process publishes to never sees a message."""
    fixed = re.compile(r"redis://(127\.0\.0\.1|localhost):6379")
    found = [f"{path.relative_to(ROOT)}:{n}" for path in (ROOT / "tests").rglob("*.py")
             if path != ROOT / "tests" / "settings.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if fixed.search(line)]
    assert not found, found


def test_no_product_module_over_500_lines():
    long = [f"{path.relative_to(ROOT)}: {n}" for path in product_modules().values()
            if (n := len(path.read_text().splitlines())) > MAX_LINES]
    assert not long, long


def test_one_request_pipeline():
    """Every API view is a stateboard.policy.PolicyApi (tests/stateboard/test_policy_matrix.py checks each endpoint);
    no module answers requests beside it (a middleware that renders API answers itself)."""
    from django.conf import settings

    assert not [m for m in settings.MIDDLEWARE if m.startswith(("ledger.", "knowledge."))]
    assert not [name for name in product_modules() if name.rsplit(".", 1)[-1] in ("fastpath", "sql", "token_sql")]


# Modules that ask which states a run is in: each group they ask about is named in ledger/domain/machine.py.
STATE_READERS = ("ledger/selectors.py", "ledger/domain/projection.py", "ledger/models/runs.py",
                 "ledger/services/writer.py", "ledger/services/goals.py", "ledger/services/rollback.py",
                 "ledger/services/oncall.py")


def _state_groups_written(tree) -> list[int]:
    """Lines of groups of run states written by hand: ``("a", "b")``, ``(*X_STATES, "a")``, ``X_STATES | {"a"}``."""
    from ledger.domain.machine import RunState

    def group(node) -> bool:
        node = node.value if isinstance(node, ast.Starred) else node
        return isinstance(node, ast.Name) and node.id.endswith("_STATES")

    def states(node, *, least: int = 1, with_groups: bool = False) -> bool:
        if not isinstance(node, (ast.Tuple, ast.List, ast.Set)) or len(node.elts) < least:
            return False
        named = [e for e in node.elts if not (with_groups and group(e))]
        return bool(named) and all(isinstance(e, ast.Constant) and e.value in RunState.values for e in named)

    return [node.lineno for node in ast.walk(tree)
            if states(node, least=2, with_groups=True)
            or isinstance(node, ast.BinOp) and (group(node.left) and states(node.right)
                                                or group(node.right) and states(node.left))]


@pytest.mark.parametrize("module", STATE_READERS)
def test_state_groups_come_from_the_machine(module):
    """No group of run states written by hand outside ``ledger.domain.machine``."""
    written = _state_groups_written(ast.parse((ROOT / module).read_text()))
    assert not written, f"{module}: a group of states written by hand at lines {written} (name it in machine.py)"


def test_the_domain_is_pure():
    """ledger/domain and knowledge/domain import no models, store or services: property-tested without a database."""
    offending = [f"{name} imports {target}" for name, path in product_modules().items()
                 if ".domain" in name for target in imports_of(name, path, module_level=False)
                 if ".domain" not in target and not target.startswith("stateboard")]
    assert not offending, "\n".join(offending)


def _is_rule(value) -> bool:
    """An authorizer (a ``may_*`` of an authorizers module), or a table of them."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return any(_is_rule(item) for item in value)
    return callable(value) and str(getattr(value, "__module__", "")).endswith(".authorizers") \
        and str(getattr(value, "__name__", "")).startswith("may_")


def _resolved(node, module):
    """What a name or a dotted attribute in ``module``'s source is at run time (None: not a global)."""
    if isinstance(node, ast.Name):
        return getattr(module, node.id, None)
    if isinstance(node, ast.Attribute):
        return getattr(_resolved(node.value, module), node.attr, None)
    return None


def _page_door_breaches(name: str, path: Path) -> list[str]:
    module = importlib.import_module(name)
    tree = ast.parse(path.read_text())
    breaches = [f"{name}.{global_name}: a table of authorizers" for global_name, value in vars(module).items()
                if isinstance(value, (dict, list, tuple)) and _is_rule(value)]
    declared = set()  # the nodes where a page may name a rule: a Policy's authorizer=, what allowed() asks
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "Policy":
                declared |= {id(k.value) for k in node.keywords if k.arg == "authorizer"}
            elif node.func.id == "allowed" and node.args:
                declared |= {id(inner) for inner in ast.walk(node.args[0])}
    decorators = {id(d) for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) for d in node.decorator_list}
    for function in (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)):
        for node in (inner for statement in function.body for inner in ast.walk(statement)):
            if isinstance(node, (ast.Name, ast.Attribute)) and id(node) not in declared \
                    and _is_rule(_resolved(node, module)):
                breaches.append(f"{name}:{node.lineno}: {ast.unparse(node)} outside its page's policy")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "page" \
                    and id(node) not in decorators:
                breaches.append(f"{name}:{node.lineno}: a policy built in a view body")
    return breaches


def test_pages_name_their_authorizers_only_in_their_policies():
    """A page view never calls an authorizer itself (nor through a table of them): its ``@page(Policy(...))``
    names it, as the API's policies do; ``allowed(...)`` may ask one which buttons to show. A policy is
    declared once, as a decorator, never built from a request in a view body."""
    pages = {name: path for name, path in product_modules().items() if name.startswith(("ledger.web", "knowledge.web"))}
    assert {"ledger.web.oncall", "ledger.web.approvals", "knowledge.web.views"} <= set(pages)
    breaches = [breach for name, path in sorted(pages.items()) for breach in _page_door_breaches(name, path)]
    assert not breaches, "\n".join(breaches)
