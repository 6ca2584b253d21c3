"""Rust functions inside compiled graphs.

A function of an extension module marked ``#[amso_macros::op]`` (and registered with
``amso_runtime::op::add``) is an eager Python function already. Here it also becomes:

- ``amso.ops.jax(module.f)``: a JAX callable through XLA's FFI, which works under ``jax.jit``
  and ``jax.vmap``, its outputs made by XLA from the shape rules the op declares;
- ``amso.ops.torch(module.f)``: a ``torch.library`` custom op (its outputs as mutated
  arguments), and a callable that makes the outputs and calls it, which works under
  ``torch.compile(fullgraph=True)`` and ``mode="reduce-overhead"``.

Both take the op's inputs and attributes, by position or keyword, and return its outputs (one
array, or a tuple). Autograd is not provided: neither declares a backward (the torch callable
refuses inputs that require grad). docs/ops.md.
"""

from __future__ import annotations

import numbers
import re
import threading
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = ["describe", "jax", "torch"]

_LOCK = threading.Lock()
_JAX_TARGETS: set[str] = set()
_TORCH_OPS: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {}
_TORCH_LIBRARIES: list[Any] = []  # a Library's registrations last as long as it does


def describe(function: Any) -> dict[str, Any]:
    """The description of an op (its parameters, shape rules, platforms and XLA handlers)."""
    module = getattr(function, "__self__", None)
    ops = getattr(module, "__amso_ops__", None)
    name = getattr(function, "__name__", None)
    if not isinstance(ops, dict) or name not in ops:
        raise TypeError(
            f"expected an op of an extension module (a Rust function marked #[amso_macros::op] and registered "
            f"with amso_runtime::op::add), got {function!r}"
        )
    description: dict[str, Any] = ops[name]
    return description


class _Signature:
    """What a call passes (inputs and attributes, in the op's order) and how outputs are made."""

    def __init__(self, function: Any) -> None:
        self.description = describe(function)
        self.name: str = self.description["name"]
        self.module = function.__self__
        params = self.description["params"]
        self.inputs = [p for p in params if p["role"] == "input"]
        self.outputs = [p for p in params if p["role"] == "output"]
        self.attrs = [p for p in params if p["role"] == "attr"]
        self.passed = [p["name"] for p in params if p["role"] in ("input", "attr")]
        self.eager_order = [p["name"] for p in params if p["role"] != "stream"]

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        if len(args) > len(self.passed):
            raise TypeError(f"{self.name}() takes {len(self.passed)} arguments ({', '.join(self.passed)}), got {len(args)}")
        values = dict(zip(self.passed, args))
        for key, value in kwargs.items():
            if key not in self.passed:
                raise TypeError(f"{self.name}() got an unexpected keyword argument '{key}'; it takes {', '.join(self.passed)}")
            if key in values:
                raise TypeError(f"{self.name}() got multiple values for argument '{key}'")
            values[key] = value
        missing = [name for name in self.passed if name not in values]
        if missing:
            raise TypeError(f"{self.name}() is missing argument(s) {', '.join(repr(m) for m in missing)}")
        return values

    def check(self, values: dict[str, Any], dtype_of: Callable[[str], Any]) -> None:
        for param in self.inputs:
            array = values[param["name"]]
            dtype, ndim = getattr(array, "dtype", None), getattr(array, "ndim", None)
            if dtype != dtype_of(param["dtype"]) or ndim != param["ndim"]:
                hint = ""
                if param["dtype"] in ("float64", "int64", "uint64", "complex128") and str(dtype) in (
                    "float32", "int32", "uint32", "complex64"):
                    hint = " (JAX makes 32-bit arrays unless jax_enable_x64 is on: jax.config.update('jax_enable_x64', True))"
                raise TypeError(
                    f"{self.name}(): argument '{param['name']}' must be a {param['dtype']} array of {param['ndim']} "
                    f"dimension(s), got {dtype} with {ndim}{hint}"
                )

    def shape(self, output: dict[str, Any], values: dict[str, Any]) -> tuple[Any, ...]:
        """The output's shape from its rule: the inputs' dimensions as they are (torch's
        symbolic sizes stay symbolic under ``torch.compile``), attributes as ints."""
        dims: list[Any] = []
        for kind, what in output["shape"]:
            if kind == "like":
                dims.extend(values[what].shape)
            elif kind == "of":
                dims.append(values[what[0]].shape[what[1]])
            elif kind == "attr":
                size = values[what]
                if size < 0:
                    raise ValueError(f"{self.name}(): '{what}' sizes output '{output['name']}' and must be >= 0, got {size}")
                dims.append(size)
            else:
                dims.append(int(what))
        return tuple(dims)

    def check_attrs(self, values: dict[str, Any]) -> None:
        """Each attribute of its declared kind: a bool for bool, an integer for int64 and int32
        (``operator.index``), a real number for the floats; never silently converted."""
        for param in self.attrs:
            value, kind = values[param["name"]], param["kind"]
            if kind == "bool":
                ok = isinstance(value, (bool, np.bool_))
            elif kind in ("int64", "int32"):
                ok = not isinstance(value, (bool, np.bool_)) and hasattr(value, "__index__")
            else:
                ok = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
            if not ok:
                raise TypeError(
                    f"{self.name}(): attribute '{param['name']}' must be {_KIND_WORDS[kind]}, got {type(value).__name__} "
                    f"{value!r}"
                )


_KIND_WORDS = {"bool": "a bool", "int64": "an integer", "int32": "an integer", "float64": "a real number",
               "float32": "a real number"}


def _ffi_version(jax_module: Any) -> tuple[int, int]:
    """The XLA FFI version of the running jaxlib (its header's), which a handler must report."""
    header = Path(jax_module.ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h"
    try:
        text = header.read_text()
    except OSError as error:
        raise RuntimeError(f"amso.ops.jax needs jaxlib's XLA FFI header, {header}, to match its version: {error}") from None
    found = [re.search(rf"#define XLA_FFI_API_{part}\s+(\d+)", text) for part in ("MAJOR", "MINOR")]
    if found[0] is None or found[1] is None:
        raise RuntimeError(f"{header} declares no XLA_FFI_API_MAJOR/MINOR; this jaxlib's FFI is not one amso knows")
    major, minor = int(found[0].group(1)), int(found[1].group(1))
    if major != 0:
        raise RuntimeError(
            f"this jaxlib's XLA FFI is version {major}.{minor}; amso's handlers read the call frames of versions 0.x "
            f"(an incompatible major version changes them): use a jaxlib whose FFI is 0.x, or an amso that knows {major}.x"
        )
    return major, minor


def jax(function: Any, *, vmap_method: str = "sequential") -> Callable[..., Any]:
    """``function`` (an op) as a JAX callable through XLA's FFI, for ``jax.jit`` and, with
    ``vmap_method`` (``jax.ffi.ffi_call``'s), ``jax.vmap``. Registered once per process for the
    CPU and CUDA platforms as the FFI target ``amso.<module>.<op>`` (the callable's ``target``);
    an op declared for one platform refuses buffers of the other when called, with a message."""
    import jax as jax_module

    signature = _Signature(function)
    for param in signature.inputs + signature.outputs:
        if param["xla_dtype"] is None:
            raise TypeError(f"{signature.name}(): argument '{param['name']}' is {param['dtype']}, which XLA has no type for")
    target = f"amso.{signature.module.__name__}.{signature.name}"
    with _LOCK:
        if target not in _JAX_TARGETS:
            signature.module.__amso_xla_version__(*_ffi_version(jax_module))
            for platform, capsule in zip(("cpu", "CUDA"), signature.description["xla"]):
                jax_module.ffi.register_ffi_target(target, capsule, platform=platform, api_version=1)
            _JAX_TARGETS.add(target)
    scalar = {"float64": np.float64, "float32": np.float32, "int64": np.int64, "int32": np.int32, "bool": np.bool_}

    def call(*args: Any, **kwargs: Any) -> Any:
        values = signature.bind(args, kwargs)
        for param in signature.attrs:
            if isinstance(values[param["name"]], jax_module.core.Tracer):
                static = ", ".join(repr(p["name"]) for p in signature.attrs)
                raise TypeError(
                    f"{signature.name}(): attribute '{param['name']}' is compiled into the graph, so it must be known "
                    f"when tracing: mark it static (jax.jit(f, static_argnames=({static},))) or bind it with "
                    f"functools.partial"
                )
        signature.check_attrs(values)
        for param in signature.inputs:  # as JAX will pass them (float64 becomes float32 without x64)
            if not isinstance(values[param["name"]], jax_module.Array):
                values[param["name"]] = jax_module.numpy.asarray(values[param["name"]])
        signature.check(values, np.dtype)
        results = []
        for output in signature.outputs:
            shape = tuple(int(d) for d in signature.shape(output, values))
            if np.prod(shape, dtype=object) * np.dtype(output["dtype"]).itemsize >= 1 << 62:
                raise ValueError(f"{signature.name}(): output '{output['name']}' of shape {shape} is too large to make")
            results.append(jax_module.ShapeDtypeStruct(shape, np.dtype(output["dtype"])))
        attrs = {param["name"]: scalar[param["kind"]](values[param["name"]]) for param in signature.attrs}
        inputs = [values[param["name"]] for param in signature.inputs]
        made = jax_module.ffi.ffi_call(target, results, vmap_method=vmap_method)(*inputs, **attrs)
        return made[0] if len(made) == 1 else tuple(made)

    call.__name__ = signature.name
    call.__qualname__ = signature.name
    call.__doc__ = function.__doc__
    call.target = target  # type: ignore[attr-defined]
    return call


def torch(function: Any, *, namespace: str | None = None) -> Callable[..., Any]:
    """``function`` (an op) as a ``torch.library`` custom op, ``namespace::name`` (the namespace
    defaults to the module's name), with its outputs as mutated arguments (``Tensor(a!)``), a
    fake implementation, and implementations for CPU and CUDA as the op declares. Returns a
    callable that makes the outputs (``torch.empty``, on the first input's device), calls the
    op and returns them; the op itself is its ``op`` attribute."""
    import torch as torch_module

    signature = _Signature(function)
    namespace = namespace or re.sub(r"\W", "_", signature.module.__name__)
    qualified = f"{namespace}::{signature.name}"
    with _LOCK:
        if qualified in _TORCH_OPS:
            made, description = _TORCH_OPS[qualified]
            if description is not signature.description:
                raise ValueError(
                    f"torch op {qualified} was already made from another op; pass amso.ops.torch(f, namespace=...) "
                    f"to name this one apart"
                )
            return made
        kinds = {"float64": "float", "float32": "float", "int64": "int", "int32": "int", "bool": "bool"}
        declared = []
        aliases = iter("abcdefghijklmnopqrstuvwxyz")
        for param in signature.description["params"]:
            if param["role"] == "input":
                declared.append(f"Tensor {param['name']}")
            elif param["role"] == "output":
                declared.append(f"Tensor({next(aliases)}!) {param['name']}")
            elif param["role"] == "attr":
                declared.append(f"{kinds[param['kind']]} {param['name']}")
        library = torch_module.library.Library(namespace, "FRAGMENT")
        library.define(f"{signature.name}({', '.join(declared)}) -> ()")

        def implementation(*args: Any) -> None:
            function(*args)

        for platform in signature.description["platforms"]:
            library.impl(signature.name, implementation, platform.upper())
        torch_module.library.register_fake(qualified, lambda *args: None, lib=library)
        _TORCH_LIBRARIES.append(library)
        op = getattr(getattr(torch_module.ops, namespace), signature.name)
        dtypes = {}
        for param in signature.inputs + signature.outputs:
            dtypes[param["name"]] = getattr(torch_module, param["dtype"], None)
            if not isinstance(dtypes[param["name"]], torch_module.dtype):
                raise TypeError(f"{signature.name}(): argument '{param['name']}' is {param['dtype']}, which torch has no dtype for")
        dtypes_by_name = {param["dtype"]: dtypes[param["name"]] for param in signature.inputs + signature.outputs}

        def call(*args: Any, **kwargs: Any) -> Any:
            values = signature.bind(args, kwargs)
            signature.check_attrs(values)
            signature.check(values, lambda name: dtypes_by_name[name])
            if torch_module.is_grad_enabled() and any(values[p["name"]].requires_grad for p in signature.inputs):
                raise RuntimeError(
                    f"{signature.name}() declares no backward, so gradients cannot flow through it: detach its inputs "
                    f"(x.detach()) or call it under torch.no_grad()"
                )
            device = values[signature.inputs[0]["name"]].device if signature.inputs else None
            made = [
                torch_module.empty(signature.shape(output, values), dtype=dtypes[output["name"]], device=device)
                for output in signature.outputs
            ]
            values.update(zip((output["name"] for output in signature.outputs), made))
            op(*(values[name] for name in signature.eager_order))
            return made[0] if len(made) == 1 else tuple(made)

        call.__name__ = signature.name
        call.__qualname__ = signature.name
        call.__doc__ = function.__doc__
        call.op = op  # type: ignore[attr-defined]
        _TORCH_OPS[qualified] = (call, signature.description)
        return call
