"""The house of imports has no circles: the imports between fco_ray's modules, at module
level and inside functions alike, form a directed acyclic graph."""
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
    assert graph["fco_ray.sweep.run"] >= {"fco_ray.sweep.schema", "fco_ray.sweep.trainable"}
