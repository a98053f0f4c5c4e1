#!/usr/bin/env python3
"""test_python_stubs -- python/shardload/__init__.pyi describes the package as it runs, and
python/shardload/torch.pyi the module shardload.torch.

Imports shardload (the build's library through SHARDLOAD_LIBRARY) and shardload.torch (Debian's
python3 has torch), and reads each stub with `ast`:
  1. every name the module exports (its __all__, and the package's __version__) has a stub entry,
     and every public name of the stub exists in the module;
  2. each function's parameters agree: names, kinds (positional, *args, keyword-only, **kwargs) and
     which have a default (inspect.signature against the stub's `def`);
  3. each class: the same base classes by name; every public method, property and class attribute
     of the running class (its own, not inherited) is in the stub with the same parameters (a
     class attribute may be declared by a base class of the stub);
     every method and property of the stub exists; every attribute the stub declares is a class
     attribute or one the class's code assigns (`self.NAME =`).
A name added to the package (a new status code's error class, a new function) fails here until
the stub has it; the message gives the line to add. Exit 0 when every check holds, 1 otherwise.
"""

import ast
import inspect
import os
import re
import sys

sys.dont_write_bytecode = True
ROOT = os.environ.get("SL_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
import shardload  # noqa: E402
import shardload.torch  # noqa: E402

STUBS = [(shardload, os.path.join(ROOT, "python", "shardload", "__init__.pyi"), {"__version__"}),
         (shardload.torch, os.path.join(ROOT, "python", "shardload", "torch.pyi"), set())]

# Dunder methods that are part of a class's interface (others, such as __del__ and __repr__, are not
# typed separately: object has them).
INTERFACE_DUNDERS = {"__init__", "__enter__", "__exit__", "__dlpack__", "__dlpack_device__",
                     "__call__", "__iter__", "__len__", "__getitem__"}
problems = []


def stub_params(fn):
    """[(name, kind, has_default)] of an ast function definition, in inspect's kinds."""
    a = fn.args
    out = []
    positional = a.posonlyargs + a.args
    first_default = len(positional) - len(a.defaults)
    for i, arg in enumerate(positional):
        kind = "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        out.append((arg.arg, kind, i >= first_default))
    if a.vararg is not None:
        out.append((a.vararg.arg, "VAR_POSITIONAL", False))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        out.append((arg.arg, "KEYWORD_ONLY", default is not None))
    if a.kwarg is not None:
        out.append((a.kwarg.arg, "VAR_KEYWORD", False))
    return out


def runtime_params(fn):
    return [(p.name, p.kind.name, p.default is not inspect.Parameter.empty)
            for p in inspect.signature(fn).parameters.values()]


def decorators(fn):
    return {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}


def entries(body):
    """{name: ast node} of the definitions in a module or class body."""
    out = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node
    return out


def suggestion(name, value):
    if inspect.isclass(value):
        bases = ", ".join(b.__name__ for b in value.__bases__)
        return "class %s(%s): ..." % (name, bases)
    if callable(value):
        return "def %s%s -> ...: ..." % (name, inspect.signature(value))
    return "%s: %s" % (name, type(value).__name__)


def check_function(where, node, fn):
    want, have = stub_params(node), runtime_params(fn)
    if want != have:
        problems.append("%s: the stub's parameters %s, the package's %s" % (where, want, have))


def public_members(cls):
    """The class's own interface: {name: raw value from its __dict__}."""
    out = {}
    for name, value in vars(cls).items():
        if name.startswith("_") and name not in INTERFACE_DUNDERS:
            continue
        out[name] = value
    return out


def assigned_attributes(cls):
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):  # generated classes (one per status code) have no source
        return set()
    return set(re.findall(r"\bself\.([A-Za-z_]\w*)\s*=", source))


def check_member(where, node, value):
    if isinstance(value, property):
        if not (isinstance(node, ast.FunctionDef) and "property" in decorators(node)):
            problems.append("%s: a property in the package; the stub needs `@property def ...`" % where)
        return
    if isinstance(value, (staticmethod, classmethod)):
        kind = type(value).__name__
        if not (isinstance(node, ast.FunctionDef) and kind in decorators(node)):
            problems.append("%s: a %s in the package; the stub needs `@%s`" % (where, kind, kind))
            return
        check_function(where, node, value.__func__)
        return
    if inspect.isfunction(value):
        if not isinstance(node, ast.FunctionDef):
            problems.append("%s: a method in the package, not a method in the stub" % where)
            return
        check_function(where, node, value)
        return
    if not isinstance(node, (ast.AnnAssign, ast.Assign)):
        problems.append("%s: a class attribute in the package, not an attribute in the stub" % where)


def inherited(stub, node):
    """{name: ast node} of the members the stub's base classes declare (nearest first)."""
    out = {}
    for b in node.bases:
        base = stub.get(b.id) if isinstance(b, ast.Name) else None
        if isinstance(base, ast.ClassDef):
            for m, member in {**inherited(stub, base), **entries(base.body)}.items():
                out.setdefault(m, member)
    return out


def check_class(stub, name, node, cls):
    stub_bases = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]
    run_bases = [b.__name__ for b in cls.__bases__ if b is not object]
    if stub_bases != run_bases:
        problems.append("%s: bases %s in the stub, %s in the package" % (name, stub_bases, run_bases))
    members = entries(node.body)
    from_bases = inherited(stub, node)
    own = public_members(cls)
    for m, value in sorted(own.items()):
        if m not in members and m in from_bases and not callable(value):
            continue  # a class attribute a base declares (each error class's status)
        if m not in members:
            line = ("%s: ..." % m) if not callable(value) else suggestion(m, value)
            problems.append("%s.%s: not in the stub (add `%s`)" % (name, m, line))
        else:
            check_member("%s.%s" % (name, m), members[m], value)
    assigned = assigned_attributes(cls)
    for m, member in sorted(members.items()):
        if m in own:
            continue
        if isinstance(member, ast.FunctionDef):
            if not callable(getattr(cls, m, None)) and not isinstance(getattr(cls, m, None), property):
                problems.append("%s.%s: in the stub, not in the package" % (name, m))
            else:
                value = inspect.getattr_static(cls, m)
                check_member("%s.%s" % (name, m), member, value)
        elif not hasattr(cls, m) and m not in assigned:
            problems.append("%s.%s: an attribute in the stub that the package neither defines nor "
                            "assigns" % (name, m))


def check_module(module, path, extra):
    """The checks above for one module and its stub; returns how many names it exports."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    stub = entries(tree.body)
    exported = set(module.__all__) | extra
    rel = os.path.relpath(path, ROOT)
    for name in sorted(exported):
        if name not in stub:
            problems.append("%s: exported by %s, not in %s (add `%s`)"
                            % (name, module.__name__, rel, suggestion(name, getattr(module, name))))
    for name, node in sorted(stub.items()):
        if name.startswith("_") and name not in extra:
            continue  # the stub's own type aliases (and __all__)
        if name not in exported:
            problems.append("%s: in %s, not exported by %s (its __all__)" % (name, rel, module.__name__))
            continue
        value = getattr(module, name)
        if isinstance(node, ast.ClassDef):
            if not inspect.isclass(value):
                problems.append("%s: a class in the stub, a %s in the package" % (name, type(value).__name__))
            else:
                check_class(stub, name, node, value)
        elif isinstance(node, ast.FunctionDef):
            if not inspect.isfunction(value):
                problems.append("%s: a function in the stub, a %s in the package" % (name, type(value).__name__))
            else:
                check_function(name, node, value)
        elif inspect.isclass(value) or inspect.isfunction(value):
            problems.append("%s: an attribute in the stub, a %s in the package" % (name, type(value).__name__))
    return len(exported)


def main():
    names = sum(check_module(module, path, extra) for module, path, extra in STUBS)
    for p in problems:
        print(p)
    print("%d problem(s) in the type stubs" % len(problems) if problems else
          "type stubs: %d names in %d modules, every check holds" % (names, len(STUBS)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
