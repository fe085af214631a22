"""cc_grpc_proto: C++ messages (and gRPC stubs) for one .proto, from the system protoc.

Bazel 4 has no native cc_grpc_library, so a genrule runs Debian's protoc and
grpc_cpp_plugin. Well-known types (struct.proto, duration.proto) resolve from
/usr/include and link from libprotobuf; they are never compiled a second time.
"""

def cc_grpc_proto(name, src, grpc = True, headers_only = False, deps = [], visibility = None):
    """Generates <src>.pb.{h,cc} (and .grpc.pb.{h,cc} when grpc) and a cc_library `name`.

    headers_only: declare only the headers, for messages whose code a system library
    already contains (a second copy aborts at start-up with "Symbol name ... conflicts").
    """
    base = src[:-len(".proto")]
    repo = native.repository_name()

    # protoc writes outputs relative to its -I root: the repository's root.
    root = "." if repo == "@" else "external/" + repo[1:]
    headers = [base + ".pb.h"] + ([base + ".grpc.pb.h"] if grpc else [])
    sources = [] if headers_only else [base + ".pb.cc"] + ([base + ".grpc.pb.cc"] if grpc else [])
    pkg = native.package_name()
    src_path = (pkg + "/" if pkg else "") + src
    grpc_flags = "--grpc_out=$(GENDIR)/{root} --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin ".format(root = root) if grpc else ""
    native.genrule(
        name = name + "_gen",
        srcs = [src],
        outs = headers + sources,
        cmd = ("/usr/bin/protoc -I{root} -I/usr/include --cpp_out=$(GENDIR)/{root} " +
               grpc_flags + "{root}/{src}").format(root = root, src = src_path),
    )
    native.cc_library(
        name = name,
        srcs = sources,
        hdrs = headers,
        deps = deps + [
            "@//third_party/system:protobuf",
        ] + (["@//third_party/system:grpc++"] if grpc else []),
        visibility = visibility,
    )
