# One kazoo lock client, driven over stdin/stdout by lock-bench: each input line is a
# command, each output line its answer ("ok ..." or "err ..."). With a third
# argument N, kazoo's Semaphore of N leases instead of its Lock.
#   acquire        blocks until kazoo's Lock (or a lease of its Semaphore) is held
#   release        releases it
#   cycles N       N uncontended acquire + release cycles, timed here (microseconds)
import sys
import time

from kazoo.client import KazooClient

hosts, path = sys.argv[1], sys.argv[2]
zk = KazooClient(hosts=hosts)
zk.start(timeout=30)
if len(sys.argv) > 3:
    lock = zk.Semaphore(path, "lock-bench", max_leases=int(sys.argv[3]))
else:
    lock = zk.Lock(path, "lock-bench")
print("ok ready", flush=True)

for line in sys.stdin:
    words = line.split()
    try:
        if words == ["acquire"]:
            lock.acquire()
            print("ok", flush=True)
        elif words == ["release"]:
            lock.release()
            print("ok", flush=True)
        elif len(words) == 2 and words[0] == "cycles":
            took = []
            for _ in range(int(words[1])):
                started = time.perf_counter()
                lock.acquire()
                lock.release()
                took.append(int((time.perf_counter() - started) * 1e6))
            print("ok " + " ".join(map(str, took)), flush=True)
        else:
            print("err unknown command: " + line.strip(), flush=True)
    except Exception as e:  # reported to the bench, which stops this contender
        print("err " + repr(e).replace("\n", " "), flush=True)
zk.stop()
