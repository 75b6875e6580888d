"""Every TCPStore operation PyTorch's client has, from PyTorch's own client,
with its results printed one per line, so that the same script run against
PyTorch's own TCPStore server and against meshrun's agent store (as a worker,
at MASTER_ADDR:MASTER_PORT) can be compared line by line.

usage: tcpstore_ops.py own      # starts PyTorch's server in this process
       tcpstore_ops.py agent    # a worker under meshrun: MASTER_ADDR:MASTER_PORT
Every request type of the client is here, queues and key listing included
(but PyTorch 1.x's WATCH_KEY, which its C++ watchKey callbacks send: not served).
"""
import datetime
import os
import sys
import threading

import torch.distributed as dist

mode = sys.argv[1]
timeout = datetime.timedelta(seconds=10)
if mode == "own":
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timeout, wait_for_workers=False)
    host, port = "127.0.0.1", server.port
else:
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])


def client():
    return dist.TCPStore(host, port, is_master=False, timeout=timeout, wait_for_workers=False)


store = dist.PrefixStore(f"ops/{mode}/x", client())  # Keys apart from anything else in the store.
out = []


def record(name, fn):
    try:
        out.append(f"{name} -> {fn()!r}")
    except Exception as e:  # The same client raises the same error against either server.
        out.append(f"{name} -> raised {type(e).__name__}")


record("set a", lambda: store.set("a", b"1"))
record("get a", lambda: store.get("a"))
record("set a again", lambda: store.set("a", b"two"))
record("get a", lambda: store.get("a"))
record("set empty", lambda: store.set("empty", b""))
record("get empty", lambda: store.get("empty"))
record("set binary", lambda: store.set("bin", bytes(range(256))))
record("get binary", lambda: store.get("bin") == bytes(range(256)))
record("compare_set absent, expected empty", lambda: store.compare_set("cs1", b"", b"new"))
record("get cs1", lambda: store.get("cs1"))
record("compare_set absent, expected x", lambda: store.compare_set("cs2", b"x", b"new"))
record("check cs2", lambda: store.check(["cs2"]))
record("compare_set match", lambda: store.compare_set("cs1", b"new", b"newer"))
record("compare_set mismatch", lambda: store.compare_set("cs1", b"nope", b"other"))
record("get cs1", lambda: store.get("cs1"))
record("add new", lambda: store.add("n", 5))
record("add existing", lambda: store.add("n", -7))
record("add zero", lambda: store.add("n", 0))
record("get counter", lambda: store.get("n"))
record("check present", lambda: store.check(["a", "n"]))
record("check one absent", lambda: store.check(["a", "absent"]))
record("wait present", lambda: store.wait(["a", "n"]))
record("wait present with timeout", lambda: store.wait(["a"], datetime.timedelta(seconds=2)))
record("wait absent times out", lambda: store.wait(["absent"], datetime.timedelta(milliseconds=300)))
record("still usable after a timed-out wait", lambda: store.get("a"))
record("delete present", lambda: store.delete_key("a"))
record("delete absent", lambda: store.delete_key("a"))
record("check deleted", lambda: store.check(["a"]))
record("set after delete", lambda: store.set("a", b"back"))
record("get after delete", lambda: store.get("a"))
if hasattr(store, "append"):
    record("append absent", lambda: store.append("ap", b"x"))
    record("append existing", lambda: store.append("ap", b"yz"))
    record("get appended", lambda: store.get("ap"))
if hasattr(store, "multi_set"):
    record("multi_set", lambda: store.multi_set(["m1", "m2", "m3"], [b"1", b"22", b""]))
    record("multi_get", lambda: store.multi_get(["m1", "m2", "m3"]))
if hasattr(dist.TCPStore, "barrier"):
    # PyTorch 2.x's BARRIER request: TCPStore's own barrier (a PrefixStore's
    # is built from ADD and WAIT on the client), on keys apart by mode.
    raw = client()
    b = f"ops/{mode}/b"
    record("barrier of 1", lambda: raw.barrier(b + "1", 1))
    record("barrier of 1 again", lambda: raw.barrier(b + "1", 1))
    record("barrier count", lambda: raw.get(b + "1"))

    def barrier_of_two():
        # Two clients: the first waits until the second arrives.
        other = client()
        first = threading.Thread(target=lambda: other.barrier(b + "2", 2, datetime.timedelta(seconds=10)))
        first.start()
        raw.barrier(b + "2", 2, datetime.timedelta(seconds=10))
        first.join(timeout=15)
        return not first.is_alive()

    record("barrier of 2, two clients", barrier_of_two)
    record("barrier of 2 times out alone", lambda: client().barrier(b + "3", 2, datetime.timedelta(milliseconds=300)))
    record("prefix store barrier of 1", lambda: store.barrier("pb", 1))
if hasattr(dist.TCPStore, "queue_push"):
    # PyTorch 2.x's queues: a namespace apart from the keys; a blocking pop
    # is a WAIT on the queue's name, then a pop.
    q = client()
    qn = f"ops/{mode}/q"
    record("queue_len never pushed", lambda: q.queue_len(qn))
    record("queue_push three", lambda: (q.queue_push(qn, b"1"), q.queue_push(qn, b""), q.queue_push(qn, b"3")))
    record("queue_len", lambda: q.queue_len(qn))
    record("check the queue's name", lambda: q.check([qn]))
    record("delete_key of the queue's name", lambda: q.delete_key(qn))
    record("queue_pop", lambda: q.queue_pop(qn))
    record("queue_pop non-blocking", lambda: q.queue_pop(qn, block=False))
    record("queue_pop", lambda: q.queue_pop(qn))
    record("queue_pop empty, non-blocking", lambda: q.queue_pop(qn, block=False))
    record("check the empty queue's name", lambda: q.check([qn]))
    record("set the queue's name as a key", lambda: q.set(qn, b"key"))
    record("queue_len after the key's set", lambda: q.queue_len(qn))
    record("get the key", lambda: q.get(qn))

    def blocking_pop():
        # Pushed by another client while this one waits (or before: the same answer).
        pusher = threading.Timer(0.3, lambda: client().queue_push(qn + "b", b"late"))
        pusher.start()
        got = q.queue_pop(qn + "b")
        pusher.join()
        return got

    record("blocking queue_pop gets a later push", blocking_pop)

    def pop_times_out():
        c = client()
        c.set_timeout(datetime.timedelta(milliseconds=300))
        return c.queue_pop(qn + "none")

    record("blocking queue_pop of an empty queue times out", pop_times_out)
    def many_producers_and_consumers():
        # 4 producers x 50 items, 4 blocking consumers: every item popped
        # exactly once, in order per producer. A producer's QUEUE_LEN after
        # its pushes (which have no reply) makes sure they are in before the
        # consumers' stop items go in.
        name = qn + "mpmc"
        got = [[] for _ in range(4)]

        def produce(p):
            c = client()
            for i in range(50):
                c.queue_push(name, f"{p}:{i}".encode())
            c.queue_len(name)

        def consume(k):
            # A blocking pop is a WAIT, then a pop: two consumers whose WAITs
            # end together may race for one item, and the loser's pop finds
            # the queue empty (QueueEmptyError, on PyTorch's own server as on
            # meshrun's). A consumer pops again then, as a user's loop would.
            c = client()
            while True:
                try:
                    item = c.queue_pop(name)
                except Exception as e:
                    if type(e).__name__ == "QueueEmptyError":
                        continue
                    raise
                if item == b"stop":
                    return
                got[k].append(item.decode())

        consumers = [threading.Thread(target=consume, args=(k,)) for k in range(4)]
        producers = [threading.Thread(target=produce, args=(p,)) for p in range(4)]
        for t in consumers + producers:
            t.start()
        for t in producers:
            t.join(timeout=60)
        stopper = client()
        for _ in consumers:
            stopper.queue_push(name, b"stop")
        for t in consumers:
            t.join(timeout=60)
        items = [x for g in got for x in g]
        in_order = all([int(x.split(":")[1]) for x in g if x.startswith(f"{p}:")] ==
                       sorted(int(x.split(":")[1]) for x in g if x.startswith(f"{p}:")) for g in got for p in range(4))
        return (len(items), len(set(items)), set(items) == {f"{p}:{i}" for p in range(4) for i in range(50)},
                in_order, any(t.is_alive() for t in consumers), stopper.queue_len(name))

    record("4 producers, 4 blocking consumers: popped, distinct, all, in order, hung, left",
           many_producers_and_consumers)
    record("prefix store queue", lambda: (store.queue_push("pq", b"x"), store.queue_len("pq"), store.queue_pop("pq")))
# The whole store's keys: those above (the mode's name made the same).
raw_keys = client()
record("num_keys", lambda: raw_keys.num_keys())
if hasattr(raw_keys, "list_keys"):
    record("list_keys", lambda: sorted(k.replace(f"ops/{mode}/", "ops/MODE/") for k in raw_keys.list_keys()))
store.set_timeout(datetime.timedelta(milliseconds=300))
record("get missing, 0.3 s timeout", lambda: store.get("missing"))
record("store usable after", lambda: store.get("cs1"))
for line in out:
    print(line, flush=True)

# Requests that end their connection, each on a connection of its own: ADD to
# a key holding text (either server closes it: the protocol has no error
# reply), and what meshrun's agent store does not serve.
record_alone = [("add to text", lambda s: (s.set("text", b"abc"), s.add("text", 1)))]
for name, fn in record_alone:
    try:
        print(f"{name} -> {fn(client())!r}", flush=True)
    except Exception as e:
        print(f"{name} -> raised {type(e).__name__}", flush=True)
print("done", flush=True)
