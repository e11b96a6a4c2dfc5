"""LiberTEM-live as the peer of `make bench-live` (bench/cmd/stemdot-livebench).

One process for the whole run: a LiveContext (LiberTEM's PipelinedExecutor on this
machine's cores, as LiberTEM-live starts it by default) and one connection per detector,
opened at its first acquisition and kept, as a user keeps them. Commands come on stdin,
one JSON object a line; each answer is one JSON line on stdout:

  {"detector": "dectris", "stream": "HOST:PORT", "api": "HOST:PORT", "frames": N,
   "masks": "M.npy", "save": "OUT.npy" or ""}
      an active acquisition of N frames (trigger mode exte) through the SIMPLON API,
      stream v1 (LiberTEM-live 0.3.0 has no stream v2 receiver);
  {"detector": "merlin", "stream": "HOST:PORT" (data port), "api": "HOST:PORT"
   (control port), ...}
      an active acquisition: SET,NUMFRAMESTOACQUIRE,N and CMD,STARTACQUISITION on the
      control port when LiberTEM-live is ready for data (Hooks.on_ready_for_data);
  {"close": true}
      closes the connections.

Each acquisition runs ApplyMasksUDF with the stack of M.npy ((n_masks, sig_y, sig_x),
LiberTEM's defaults otherwise) through LiveContext.run_udf, and answers
{"frames": N, "wall_s": ..., "cpu_s": ...}: wall_s is run_udf's (arming and triggering
included), cpu_s the user + system seconds of this process and all its descendants
over the same interval (psutil). "save" writes the result, (N, n_masks).

LiberTEM-live 0.3.0 parses a stream v1 header of header_detail "basic" only (a header
with the flat field and pixel mask fails in libertem_dectris); it sets basic itself after
arming, so before the first acquisition this script sets it on the SIMPLON API.
"""
import json
import sys
import time

import numpy as np
import psutil
from libertem.udf.masks import ApplyMasksUDF
from libertem_live.api import Hooks, LiveContext


def tree_cpu():
    me = psutil.Process()
    t = me.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for c in me.children(recursive=True):
        try:
            ct = c.cpu_times()
            total += ct.user + ct.system
        except psutil.NoSuchProcess:
            pass
    return total


def host_port(s):
    host, port = s.rsplit(":", 1)
    return host, int(port)


class StartMerlin(Hooks):
    def __init__(self, conn, frames):
        self.conn, self.frames = conn, frames

    def on_ready_for_data(self, env):
        with self.conn.control() as c:
            c.set("NUMFRAMESTOACQUIRE", self.frames)
            c.cmd("STARTACQUISITION")


def main():
    ctx = LiveContext()
    conns = {}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd.get("close"):
                for c in conns.values():
                    c.close()
                conns.clear()
                print(json.dumps({"closed": True}), flush=True)
                continue
            det, n = cmd["detector"], cmd["frames"]
            key = (det, cmd["stream"], cmd["api"])
            (dhost, dport), (ahost, aport) = host_port(cmd["stream"]), host_port(cmd["api"])
            conn = conns.get(key)
            if conn is None:
                if det == "dectris":
                    conn = ctx.make_connection("dectris").open(
                        api_host=ahost, api_port=aport, data_host=dhost, data_port=dport)
                    conn.get_api_client().setStreamConfig("header_detail", "basic")
                else:
                    conn = ctx.make_connection("merlin").open(
                        api_host=ahost, api_port=aport, data_host=dhost, data_port=dport)
                conns[key] = conn
            stack = np.load(cmd["masks"])
            udf = ApplyMasksUDF(mask_factories=lambda: stack)
            if det == "dectris":
                aq = ctx.make_acquisition(
                    conn=conn, nav_shape=(n,),
                    controller=conn.get_active_controller(trigger_mode="exte"))
            else:
                aq = ctx.make_acquisition(conn=conn, nav_shape=(n,), hooks=StartMerlin(conn, n))
            c0, t0 = tree_cpu(), time.perf_counter()
            res = ctx.run_udf(dataset=aq, udf=udf)
            wall, cpu = time.perf_counter() - t0, tree_cpu() - c0
            if cmd.get("save"):
                np.save(cmd["save"], np.asarray(res["intensity"].data).reshape(n, -1))
            print(json.dumps({"frames": n, "wall_s": wall, "cpu_s": cpu}), flush=True)
        except Exception as e:  # the harness reports it and goes on
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
    for c in conns.values():
        c.close()
    ctx.close()


if __name__ == "__main__":
    main()
