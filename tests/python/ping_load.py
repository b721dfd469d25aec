"""Drive `ping_conductor` with Magnum 23.0.0's own client (ListenerAPI over
oslo.messaging) from several threads and write one JSON line per call.

Used by the broker-restart test and by the benchmark; it runs in its own
process because oslo.messaging's transport is process-global.

    python ping_load.py --config-file client.conf --server test-host \
        --calls 1000 --concurrency 8 [--timeout 5] [--pace 0.02] [--out calls.jsonl]
"""
import argparse
import json
import sys
import threading
import time
import warnings

warnings.simplefilter("ignore")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config-file", required=True)
    p.add_argument("--server", required=True)
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--timeout", type=float, default=5)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--pace", type=float, default=0.0, help="seconds each thread waits between calls")
    p.add_argument("--out", default="-")
    p.add_argument("--cast-deletes", type=int, default=0,
                   help="instead of calls: cast this many cluster_delete (Magnum's conductor API, "
                        "cluster_delete_async) of clusters that do not exist, from the threads")
    a = p.parse_args()

    from magnum.common import context as mctx
    from magnum.common import service as magnum_service
    from magnum.conductor import api

    magnum_service.prepare_service(["magnum-api", "--config-file", a.config_file])
    ctx = mctx.make_context(user_id="u", project_id="p", is_admin=False, auth_token="t")
    listener = api.ListenerAPI(context=ctx, topic="magnum-conductor", server=a.server, timeout=a.timeout)

    for _ in range(a.warmup):  # reply queue declared, connections pooled
        listener.ping_conductor()

    out = sys.stdout if a.out == "-" else open(a.out, "w")
    lock = threading.Lock()
    counter = iter(range(a.cast_deletes or a.calls))
    casts = api.API(context=ctx, topic="magnum-conductor") if a.cast_deletes else None

    def worker():
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            t0 = time.time()
            try:
                if casts:
                    casts.cluster_delete_async(f"00000000-0000-4000-8000-{i:012d}")
                    ok, err = True, None
                else:
                    ok, err = listener.ping_conductor() is True, None
            except Exception as e:  # the outcome is data here, not a test failure
                ok, err = False, type(e).__name__
            t1 = time.time()
            with lock:
                out.write(json.dumps({"i": i, "start": t0, "end": t1, "ok": ok, "error": err}) + "\n")
                out.flush()
            if a.pace:
                time.sleep(a.pace)

    threads = [threading.Thread(target=worker) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if out is not sys.stdout:
        out.close()


if __name__ == "__main__":
    main()
