"""The generated protobuf and gRPC modules, imported with messages that say what is missing.

The stubs are generated at build time (client/python/CMakeLists.txt, target manyshot_python_stubs)
into BUILD/client/python, which must be on sys.path beside client/python (README.md).
"""

import os

_HOW_TO_GET_GRPC = (
    "On Debian/Ubuntu: `apt install python3-grpcio python3-protobuf` and run /usr/bin/python3 "
    "(a virtualenv sees them only when made with --system-site-packages); in any other Python: "
    "`pip install grpcio protobuf` (see client/python/README.md)")

try:
    import grpc
except ImportError as error:
    raise ImportError(f"manyshot_client needs the `grpc` module (grpcio). {_HOW_TO_GET_GRPC}") \
        from error
if not hasattr(grpc, "insecure_channel"):
    # Without grpcio, `import grpc` can still succeed: the stub directory's grpc/health/... folder
    # makes `grpc` an (empty) namespace package.
    raise ImportError(f"manyshot_client needs the `grpc` module (grpcio), but the `grpc` found "
                      f"at {list(grpc.__path__)} is not grpcio. {_HOW_TO_GET_GRPC}")
try:
    from google.protobuf import descriptor_pb2, descriptor_pool, json_format  # noqa: F401
    from google.protobuf.message import DecodeError  # noqa: F401
except ImportError as error:
    raise ImportError(f"manyshot_client needs the `google.protobuf` module (protobuf). "
                      f"{_HOW_TO_GET_GRPC}") from error

_HOW_TO_GET_STUBS = (
    "the generated stubs are not on sys.path: build them (`cmake --build BUILD --target "
    "manyshot_python_stubs`, part of every full build) and put BUILD/client/python on PYTHONPATH "
    "beside client/python, or generate them with the single protoc command in "
    "client/python/README.md")

try:
    from manyshot.v1 import manyshot_pb2, manyshot_pb2_grpc
    from google.rpc import error_details_pb2, status_pb2
except ImportError as error:
    raise ImportError(f"manyshot_client: {_HOW_TO_GET_STUBS} ({error})") from error

# The stubs of grpc/health/v1/health.proto and grpc/reflection/v1alpha/reflection.proto are
# modules grpc.health.v1.* and grpc.reflection.v1alpha.* (their proto packages; the generated
# *_pb2_grpc.py import them under those names). `grpc` itself is grpcio's regular package, whose
# __path__ alone is searched for its submodules, so the stub directory's grpc/ folder is added to
# it. grpcio has no grpc.health or grpc.reflection of its own (the PyPI health and reflection
# packages are grpc_health and grpc_reflection), so nothing is shadowed.
STUBS_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    manyshot_pb2.__file__))))
_grpc_stub_dir = os.path.join(STUBS_DIR, "grpc")
if os.path.isdir(_grpc_stub_dir) and _grpc_stub_dir not in grpc.__path__:
    grpc.__path__.append(_grpc_stub_dir)
try:
    from grpc.health.v1 import health_pb2, health_pb2_grpc
    from grpc.reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
except ImportError as error:
    raise ImportError(f"manyshot_client: {_HOW_TO_GET_STUBS}; {STUBS_DIR} has manyshot/v1 but "
                      f"not grpc/health/v1 or grpc/reflection/v1alpha ({error})") from error

__all__ = ["grpc", "manyshot_pb2", "manyshot_pb2_grpc", "status_pb2", "error_details_pb2",
           "health_pb2", "health_pb2_grpc", "reflection_pb2", "reflection_pb2_grpc",
           "descriptor_pb2", "descriptor_pool", "json_format", "DecodeError", "STUBS_DIR"]
