"""The house's shape, read from the code (issue 24): files are rooms,
`crate::`/`super::` paths are arrows, and no arrow leads back to where it
came from (no import cycle between files of a crate). Unit tests
(`#[cfg(test)] mod tests`) and comments are not read."""
import os
import re

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
CRATES = ["conductor/src", "common/src", "rpc-schema/src", "tests/capi-sim/src"]


def modules(src):
    """Module path (`lifecycle::engine`) -> file."""
    out = {}
    for d, _, files in os.walk(src):
        for f in files:
            if f.endswith(".rs") and f != "tests.rs":  # unit tests kept beside their module
                rel = os.path.relpath(os.path.join(d, f), src)[:-3].replace(os.sep, "::")
                rel = re.sub(r"(^|::)mod$", "", rel)
                out["" if rel in ("lib", "main") else rel] = os.path.join(d, f)
    return out


def arrows(src):
    mods = modules(src)
    out = {m: set() for m in mods}
    for m, path in mods.items():
        text = open(path).read()
        cut = text.find("#[cfg(test)]\nmod tests")
        text = re.sub(r"//[^\n]*", "", text if cut < 0 else text[:cut])
        own = m.split("::") if m else []
        if not path.endswith("mod.rs"):
            own = own[:-1]  # `super` of a file module is its parent
        else:
            own = own[:-1]
        for base, rest in re.findall(r"\b(crate|super)((?:::\w+)+)", text):
            start = [] if base == "crate" else own
            parts = [p for p in rest.split("::") if p]
            for k in range(len(parts), 0, -1):
                target = "::".join(start + parts[:k])
                if target in mods:
                    if target and target != m and not m.startswith(target + "::"):
                        out[m].add(target)
                    break
    return out


def cycles(graph):
    """Strongly connected groups of more than one file (Tarjan)."""
    index, low, stack, on, found, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_detector_sees_a_cycle(tmp_path):
    (tmp_path / "a.rs").write_text("use crate::b::B;\n")
    (tmp_path / "b.rs").write_text("use super::a::A;\n")
    (tmp_path / "c.rs").write_text("use crate::a::A;\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\n")
    assert cycles(arrows(str(tmp_path))) == [["a", "b"]]


def test_no_import_cycle_in_the_workspace():
    for crate in CRATES:
        graph = arrows(os.path.join(ROOT, crate))
        assert len(graph) > 3, crate
        assert cycles(graph) == [], crate


# Module paths under lifecycle:: by layer; the sub-folders are the layers
# that have one (operations/, status/, coordination/), the shared core sits
# at lifecycle/ itself.
LAYERS = {
    "pure core": ["rows", "plan", "sync", "cache"],
    "core": ["engine", "runner", "error", "watch", "credentials", "keystone", "topology", "cloud"],
    "coordination": ["coordination::lease", "coordination::elect"],
    "operations": ["operations::create", "operations::delete", "operations::scale", "operations::upgrade",
                   "operations::nodegroups", "operations::rotate"],
    "status": ["status::reconcile", "status::resume", "status::owners", "status::leader"],
}
MAY_USE = {
    "pure core": {"pure core"},
    "coordination": {"pure core", "coordination"},
    "core": {"pure core", "coordination", "core"},
    "operations": {"pure core", "coordination", "core"},
    "status": {"pure core", "coordination", "core", "status"},
}
FOLDERS = {"coordination", "operations", "status"}


def test_lifecycle_layers_are_as_docs_architecture_says():
    graph = arrows(os.path.join(ROOT, "conductor/src"))
    layer_of = {m: layer for layer, ms in LAYERS.items() for m in ms}
    mods = {m.split("::", 1)[1] for m in graph if m.startswith("lifecycle::")} - FOLDERS
    assert mods == set(layer_of), f"modules not in a layer (or gone): {mods ^ set(layer_of)}"
    wrong = []
    for m in mods:
        for t in graph["lifecycle::" + m]:
            if not t.startswith("lifecycle::") or t.split("::", 1)[1] in FOLDERS:
                continue
            t = t.split("::", 1)[1]
            if layer_of[t] not in MAY_USE[layer_of[m]]:
                wrong.append(f"{m} ({layer_of[m]}) -> {t} ({layer_of[t]})")
    assert not wrong, wrong
    # The folder modules only declare their files.
    for folder in FOLDERS:
        assert graph["lifecycle::" + folder] <= {"lifecycle::" + folder + "::" + m.split("::")[1]
                                                 for m in layer_of if m.startswith(folder + "::")}, folder
    doc = open(os.path.join(ROOT, "docs", "architecture.md")).read()
    for layer, ms in LAYERS.items():
        shown = ", ".join(f"`{m.split('::')[-1]}`" for m in ms)
        assert f"| {layer} | " in doc and shown in doc, (layer, shown)
