"""The house of imports has no circles: the imports between fco_ray's modules, at module
level and inside functions alike, form a directed acyclic graph; and none runs back up: a
package imports only its own layer and the layers below (`LAYERS`, docs/architecture.md)."""
import ast
from pathlib import Path

import fco_ray

ROOT = Path(fco_ray.__file__).parent


def module_name(path: Path) -> str:
    parts = ("fco_ray",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """fco_ray modules imported anywhere in the file (the most specific module named)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                       for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def test_no_import_circles():
    files = sorted(ROOT.rglob("*.py"))
    modules = {module_name(f) for f in files}
    graph = {module_name(f): imports(f, modules) for f in files}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycle = path[path.index(target):] + [target]
                raise AssertionError("import circle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, path + [target])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert graph["fco_ray.sweep.run"] >= {"fco_ray.sweep.checks", "fco_ray.sweep.trainable"}


#: what the config schemas must not load: a bad value is answered in a blink without them
HEAVY = ["numba", "pandas", "jax", "ray", "mlflow", "scipy", "sklearn", "matplotlib"]


def test_config_schemas_import_without_heavy_modules():
    """Every schema a config is checked against (the run and sweep files, every registered
    algorithm's Hyper and problem's parameters), imported and used in a fresh process,
    loads none of numba, pandas, JAX, Ray, MLflow, SciPy: those load at their use sites."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from fco_ray import ALGORITHMS, PROBLEMS, ConfigError\n"
        "from fco_ray.core.config import parse_run\n"
        "import fco_ray.sweep.schema, fco_ray.sweep.sweep, fco_ray.sweep.checks  # noqa: F401\n"
        "hypers = [a.Hyper for a in ALGORITHMS.values()]\n"
        "params = [spec.params for spec in PROBLEMS.values()]\n"
        "assert len(hypers) >= 10 and len(params) >= 8, (hypers, params)\n"
        "for bad in ({'client_lr': -1}, {'client_lr': '0.0l'}):\n"
        "    try:\n"
        "        parse_run({'problem': {'name': 'lasso'},\n"
        "                   'algorithm': {'name': 'fedmid', **bad}})\n"
        "    except ConfigError:\n"
        "        pass\n"
        "    else:\n"
        "        raise SystemExit(f'{bad} was accepted')\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


#: fco_ray's packages from the bottom up (docs/architecture.md): a module imports modules of
#: its own package and of the layers below, never one above (no arrow runs back up)
LAYERS = [
    {"runtime", "display"},
    {"ops", "registry", "data"},
    {"problems", "accelerators", "tracking", "experiments"},
    {"rules"},
    {"algorithms"},
    {"backends"},
    {"core"},
    {"report"},
    {"sweep"},
    {"api"},
    {"cli", "fco_ray"},
    {"__main__"},
]


def package(module: str) -> str:
    """The package of `fco_ray.<package>...` ("fco_ray" for the package's own __init__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "fco_ray"


def test_imports_go_down_the_layers():
    files = sorted(ROOT.rglob("*.py"))
    modules = {module_name(f) for f in files}
    layer = {name: i for i, names in enumerate(LAYERS) for name in names}
    assert {package(m) for m in modules} == set(layer)  # every package has its layer
    up = [f"{module_name(f)} -> {target}" for f in files for target in sorted(imports(f, modules))
          if layer[package(target)] > layer[package(module_name(f))]]
    assert up == []
