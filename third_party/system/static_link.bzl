"""Link flags that take gRPC, protobuf, abseil, c-ares, re2 and yaml-cpp from
Debian's static archives (lib*.a) instead of its shared libraries.

For aggregatord only (daemon/BUILD): ld.so loads and relocates every shared
object before any code of the executable runs, and a SIGHUP or SIGTERM in that
time ends the daemon (issue 26 item 17). Linked so, aggregatord loads 23 shared
objects instead of 78. (Its loader-audit module, daemon/signals_audit.c, now
blocks the signals before ld.so loads any of them; this still shortens the
window where that module is missing, and every start.) The other binaries and
the tests keep the shared libraries.

They come before the -l flags of //third_party/system's libraries on the link
line (Bazel puts a binary's linkopts first): the archives, in one group, resolve
every symbol those libraries would, and --as-needed then leaves the shared
copies out (none of them is loaded: two copies of protobuf's or gRPC's globals
in one process would clash). What only the shared libraries still define
(OpenSSL, zlib, systemd, civetweb, prometheus-cpp, spdlog, fmt, libstdc++)
stays shared.

Not for the sanitizer builds: lib/base/tsan_defaults.cc suppresses reports in
uninstrumented libraries by their .so names.
"""

_STATIC = [
    "grpc++_reflection",
    "grpc++",
    "grpc",
    "gpr",
    "upb",
    "address_sorting",
    "re2",
    "cares",
    "protobuf",
    "yaml-cpp",
] + ["absl_" + name for name in [
    "bad_optional_access",
    "bad_variant_access",
    "base",
    "city",
    "civil_time",
    "cord",
    "cord_internal",
    "cordz_functions",
    "cordz_handle",
    "cordz_info",
    "debugging_internal",
    "demangle_internal",
    "exponential_biased",
    "graphcycles_internal",
    "hash",
    "int128",
    "low_level_hash",
    "malloc_internal",
    "random_internal_platform",
    "random_internal_pool_urbg",
    "random_internal_randen",
    "random_internal_randen_hwaes",
    "random_internal_randen_hwaes_impl",
    "random_internal_randen_slow",
    "random_internal_seed_material",
    "random_seed_gen_exception",
    "raw_hash_set",
    "raw_logging_internal",
    "spinlock_wait",
    "stacktrace",
    "status",
    "statusor",
    "str_format_internal",
    "strerror",
    "strings",
    "strings_internal",
    "symbolize",
    "synchronization",
    "throw_delegate",
    "time",
    "time_zone",
]]

STATIC_SYSTEM_LINKOPTS = (
    ["-Wl,--start-group"] +
    ["-l:lib%s.a" % name for name in _STATIC] +
    ["-Wl,--end-group", "-Wl,--as-needed"] +
    # gRPC's compression; shared, as the other libraries that use it load it.
    ["-lz"]
)
