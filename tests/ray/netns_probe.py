"""What a TCP port of a Ray node answers to a caller without (or with) the cluster's token.

Run by tests/ray/test_netns_cluster.py on another host of its network:
    python tests/ray/netns_probe.py [--token FILE] HOST:PORT ...
prints one JSON object per port: `http` (the status of GET / and GET /api/version, or the
error) and `grpc` (the status code of one call of each kind of Ray gRPC server: GCS,
raylet, object manager, core worker, dashboard agent, Ray Client; `UNIMPLEMENTED` where
the port serves another kind). The calls carry empty requests: refused before they are
read without the token; with it, read-only or no-ops.
"""
import json
import sys
import urllib.error
import urllib.request

import grpc

METHODS = ["/ray.rpc.NodeInfoGcsService/GetAllNodeInfo", "/ray.rpc.NodeManagerService/GetNodeStats",
           "/ray.rpc.ObjectManagerService/Pull", "/ray.rpc.CoreWorkerService/GetCoreWorkerStats",
           "/ray.rpc.ReporterService/GetTraceback", "/ray.rpc.RayletDriver/ClusterInfo"]


def http(target: str, token: str | None) -> dict:
    out = {}
    for path in ("/", "/api/version"):
        request = urllib.request.Request(f"http://{target}{path}")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=5) as r:
                out[path] = r.status
        except urllib.error.HTTPError as e:
            out[path] = e.code
        except Exception as e:  # not HTTP (a gRPC port), or it closed the connection
            out[path] = type(e).__name__
    return out


def rpc(target: str, token: str | None) -> dict:
    out = {}
    metadata = [("authorization", f"Bearer {token}")] if token else None
    with grpc.insecure_channel(target) as channel:
        for method in METHODS:
            call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
            try:
                call(b"", timeout=5, metadata=metadata)
                out[method] = "OK"
            except grpc.RpcError as e:
                out[method] = e.code().name
    return out


def main(argv: list[str]) -> None:
    token = None
    if argv[:1] == ["--token"]:
        token, argv = open(argv[1]).read().strip(), argv[2:]
    for target in argv:
        print(json.dumps({"target": target, "http": http(target, token), "grpc": rpc(target, token)}),
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
