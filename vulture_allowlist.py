"""Names the dead-code check (`uv run vulture`, a step of .ci/run) must not report, each with why.

vulture reads this file as code: a name used here counts as used. Anything else it reports is dead:
delete it (or, when it is API kept on purpose, add it here with the reason).
"""
# ruff: noqa

from typing import Any

_: Any = None

# tinygrad's public API, kept so ported programs run (nothing in this repository calls them)
_.uchar, _.ushort, _.uint, _.ulong, _.char  # dtypes aliases
_.is_bool  # dtypes.is_bool
_.invalids, _.max_numel  # Tensor.invalids / Tensor.max_numel
_.do_update_stats  # Tensor.realize(do_update_stats=...)
_.sorted_  # Tensor.topk(sorted_=...)
_.precompile, _.precompile_backward, _.allow_implicit  # tg.function(...): tinygrad's options, accepted, no effect
_.global_mem  # GlobalCounters.global_mem (bytes moved), read by users and DEBUG tools

# Ops members kept in the enum: deleting a member renumbers the ops after it (auto()), a change to
# make on its own (and tinygrad programs name them)
_.KERNEL, _.IF, _.ENDIF, _.CUSTOM

# protocol hooks called by the standard library, never by name in this repository
_.objtype  # TinyJit.__get__(self, obj, objtype): the descriptor protocol's signature
_.daemon_threads, _.server_version, _.close_connection, _.default_request_version  # socketserver / http.server attributes
_.do_GET, _.do_POST, _.log_message  # http.server.BaseHTTPRequestHandler methods

# read by users of the LLM runner (`--benchmark` prints them from the returned stats)
_.prefill_s, _.decode_s

# module-level __getattr__ (PEP 562: lazy attributes of tg_nn / tg.nn, called by the import system)
_.__getattr__

# pytest: module-level marks (`pytestmark`) are read by pytest by name
_.pytestmark

# pytest: fixtures are used by name as test arguments, autouse fixtures never by name
_.on_device, _.low_threshold, _._no_stale_schedule
_._leak  # test_realizer sets it to check that the module-state check sees a new registry

# attributes set on third-party objects (torch's TF32 switch, selenium's browser path)
_.allow_tf32, _.binary_location

# Allocator's public entry points (size-checked) for code outside Buffer: a device's users and tests; Buffer
# calls _alloc/_free itself (it checked the size when made)
_.alloc, _.free
