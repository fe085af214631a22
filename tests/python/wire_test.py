"""learner_aggregator.wire, the Learn hot path's bytes: what the client writes parses to
what protobuf would have built, what the learner reads is what protobuf would have
parsed, and a sample's meta is decoded only when a learner reads it."""

import copy
import dataclasses
import json
import pickle
import random
import sys
import threading
import unittest
import unittest.mock

import numpy as np
from google.protobuf import struct_pb2
from google.protobuf.message import DecodeError

import testutil
from learner_aggregator import AggregatorClient, LearnerServer, Sample
from learner_aggregator import structs, wire
from learner_aggregator._proto import learner_pb2
from learner_aggregator.structs import fill_struct, from_struct, from_struct_bytes, to_struct
from learner_aggregator.wire import decode_learn_request, encode_plan_id, encode_sample

METAS = [
    {},
    {"replay_unique_id": "7-0123456789", "weight": 0.25},
    {"replay_unique_id": 7, "weight": 1, "done": True, "truncated": False},
    {"none": None, "list": [1, "a", None, [2.5]], "nested": {"x": {"y": "z"}}},
    {"numpy": np.float32(0.5), "array": np.arange(3), "int64": np.int64(-4)},
    {"unicode": "naïve — 学习", "": "empty key", "long": "v" * 300, "k" * 200: -0.0},
    {"nan": float("nan"), "inf": float("-inf"), "big": 2 ** 60},
]
DATAS = [b"", b"\x00" * 20, bytes(range(256)) * 3]


def plain(meta):
    """A meta as comparable text: a Struct map has no order, and NaN != NaN."""
    return json.dumps(meta, sort_keys=True)


def nested_struct(buffer):
    """A serialized Struct as protobuf parses it inside a message (a sample's meta)."""
    return learner_pb2.Sample.FromString(b"\x12" + varint(len(buffer)) + buffer).meta


def varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def protobuf_request(samples, plan_id=""):
    """The LearnRequest as the SDK built it before wire: a message per sample."""
    request = learner_pb2.LearnRequest(plan_id=plan_id)
    for sample in samples:
        fill_struct(request.samples.add(data=sample.data).meta, sample.meta)
    return request


def all_samples():
    return [Sample(data, dict(meta)) for data in DATAS for meta in METAS]


class EncodeTest(unittest.TestCase):
    def test_bytes_parse_to_what_protobuf_builds(self):
        samples = all_samples()
        for plan_id in ("", "plan-3"):
            encoded = b"".join(encode_sample(s) for s in samples) + encode_plan_id(plan_id)
            parsed = learner_pb2.LearnRequest.FromString(encoded)
            expected = protobuf_request(samples, plan_id)
            self.assertEqual(parsed.plan_id, plan_id)
            self.assertEqual(len(parsed.samples), len(expected.samples))
            for got, want in zip(parsed.samples, expected.samples):
                self.assertEqual(got.data, want.data)
                self.assertEqual(got.HasField("meta"), want.HasField("meta"))
                self.assertEqual(plain(from_struct(got.meta)), plain(from_struct(want.meta)))

    def test_what_protobuf_refuses_is_refused_alike(self):
        for meta, message in (({1: "x"}, "a Struct key must be a string, not int"),
                              ({"x": object()}, "cannot put a object into a protobuf Value"),
                              ({"x": {"y": b"raw"}}, "cannot put a bytes into a protobuf Value")):
            with self.assertRaises(TypeError) as caught:
                encode_sample(Sample(b"d", meta))
            self.assertEqual(str(caught.exception), message)
        with self.assertRaises(TypeError) as caught:
            encode_sample(Sample(b"d", {"x": 10 ** 400}))
        self.assertIn("has type int, but expected one of: int, float", str(caught.exception))
        with self.assertRaises(TypeError):
            encode_sample(Sample("not bytes", {}))  # type: ignore[arg-type]

    def test_other_mappings_and_bytes_likes_go_through_protobuf(self):
        class Meta(dict):
            pass
        sample = Sample(b"abc", Meta(a=1.0))
        self.assertEqual(learner_pb2.LearnRequest.FromString(encode_sample(sample)),
                         protobuf_request([sample]))


class DecodeTest(unittest.TestCase):
    def assert_same_samples(self, got, want):
        self.assertEqual([s.data for s in got], [s.data for s in want])
        self.assertEqual([plain(s.meta) for s in got], [plain(from_struct(s.meta)) for s in want])

    def test_canonical_bytes(self):
        request = protobuf_request(all_samples(), "plan-9")
        request.membership.generation = 4
        request.membership.members.extend(["a", "b"])
        samples, rest = decode_learn_request(request.SerializeToString())
        self.assert_same_samples(samples, request.samples)
        self.assertEqual(rest.plan_id, "plan-9")
        self.assertEqual(rest.membership.generation, 4)
        self.assertEqual(list(rest.membership.members), ["a", "b"])
        self.assertEqual(len(rest.samples), 0)

    def test_what_protobuf_writes_takes_the_fast_way(self):
        # aggregatord forwards what its protobuf (C++, as this one) serializes.
        request = protobuf_request([Sample(b"d" * 200, {"replay_unique_id": "7-x",
                                                        "weight": 0.5, "done": False,
                                                        "none": None, "": ""})] * 3, "p")
        with unittest.mock.patch.object(structs, "_parse_struct",
                                        side_effect=AssertionError("parsed by protobuf")):
            # Not _NotCanonical, which would have the whole request parsed by protobuf.
            samples, rest = wire._decode_canonical(request.SerializeToString())
            metas = [s.meta for s in samples]
        self.assertEqual(rest.plan_id, "p")
        self.assertEqual(metas, [from_struct(s.meta) for s in request.samples])

    def test_other_layouts_read_as_protobuf_reads_them(self):
        meta_a, meta_b = Sample(b"", {"a": 1.0}), Sample(b"", {"b": "x"})
        body_a = encode_sample(meta_a)[2:]
        body_b = encode_sample(meta_b)[2:]
        data = b"\x0a\x03abc"
        layouts = [
            body_a + data,                      # meta before data
            data + body_a + body_b,             # meta twice: protobuf merges them
            data + data + b"\x0a\x01z",         # data three times: the last one wins
            data + b"\x18\x05" + body_a,        # an unknown field (3, a varint)
        ]
        for body in layouts:
            encoded = b"\x0a" + bytes([len(body)]) + body + encode_plan_id("p")
            samples, rest = decode_learn_request(encoded)
            self.assert_same_samples(samples, learner_pb2.LearnRequest.FromString(encoded).samples)
            self.assertEqual(rest.plan_id, "p")

    def test_broken_bytes_fail_as_protobuf_fails(self):
        good = protobuf_request(all_samples()[:3]).SerializeToString()
        for broken in (good[:-1], good + b"\x0a\x05ab", b"\x0a\xff\xff\xff\xff\xff\xff"):
            with self.assertRaises(DecodeError):
                decode_learn_request(broken)

    def test_meta_is_decoded_when_first_read(self):
        sent = Sample(b"abc", {"replay_unique_id": "u-1", "weight": 0.5})
        (sample,), _ = decode_learn_request(encode_sample(sent))
        self.assertNotIn("meta", vars(sample))  # not decoded yet
        self.assertIs(type(sample), Sample)
        self.assertEqual(sample, sent)  # dataclass equality reads it
        self.assertEqual(vars(sample), {"data": b"abc", "meta": sent.meta})
        self.assertIs(sample.meta, sample.meta)  # decoded once, then an attribute

    def test_threads_reading_meta_at_once_get_one_dict(self):
        sent = Sample(b"abc", {f"k{i}": f"v{i}" for i in range(200)})  # a long decode
        # Switch threads every microsecond, so that their reads overlap.
        self.addCleanup(sys.setswitchinterval, sys.getswitchinterval())
        sys.setswitchinterval(1e-6)
        for _ in range(100):
            (sample,), _ = decode_learn_request(encode_sample(sent))
            start = threading.Barrier(4)
            seen = []

            def read():
                start.wait(timeout=testutil.LONG_WAIT)
                seen.append(sample.meta)
            threads = [threading.Thread(target=read) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=testutil.LONG_WAIT)
            self.assertEqual(len(seen), 4)
            self.assertTrue(all(meta is sample.meta for meta in seen),
                            "threads reading meta at once got different dicts")

    def test_a_sample_from_the_wire_is_an_ordinary_sample(self):
        sent = Sample(b"abc", {"s": "x"})  # one key: a Struct map has no order
        fresh = lambda: decode_learn_request(encode_sample(sent))[0][0]  # noqa: E731
        self.assertEqual(repr(fresh()), repr(sent))
        self.assertEqual(dataclasses.asdict(fresh()), dataclasses.asdict(sent))
        self.assertEqual(dataclasses.replace(fresh(), data=b"d"), Sample(b"d", sent.meta))
        self.assertEqual(copy.deepcopy(fresh()), sent)
        self.assertEqual(pickle.loads(pickle.dumps(fresh())), sent)
        # Pickled with its meta decoded: a Sample class without the descriptor loads it.
        self.assertEqual(fresh().__getstate__(), {"data": b"abc", "meta": sent.meta})
        self.assertEqual(vars(copy.copy(fresh())), {"data": b"abc", "meta": sent.meta})
        assigned = fresh()
        assigned.meta = {"mine": True}  # an assignment before any read wins
        self.assertEqual(assigned.meta, {"mine": True})
        self.assertFalse(hasattr(Sample, "meta"))  # as before: the default is a factory
        self.assertEqual(Sample(b"x").meta, {})


class StructBytesTest(unittest.TestCase):
    def test_reads_what_protobuf_reads(self):
        for meta in METAS + [{"dup": 1.0}]:
            buffer = to_struct(meta).SerializeToString()
            self.assertEqual(plain(from_struct_bytes(buffer)),
                             plain(from_struct(nested_struct(buffer))))
        # A key twice (two map entries): the last one wins, as in protobuf's map.
        twice = to_struct({"k": 1.0}).SerializeToString() + \
            to_struct({"k": "two"}).SerializeToString()
        self.assertEqual(from_struct_bytes(twice), {"k": "two"})
        self.assertEqual(from_struct_bytes(b""), {})

    def test_broken_bytes_fail_as_protobuf_fails(self):
        good = to_struct({"a": "text", "b": 1.5}).SerializeToString()
        for broken in (good[:-1], good[:-3], b"\x0a\x05\x0a\x03ab", b"\x0a\xff"):
            with self.assertRaises(DecodeError):
                from_struct_bytes(broken)
        invalid_utf8 = b"\x0a\x09\x0a\x01k\x12\x04\x1a\x02\xff\xfe"
        with self.assertRaises(DecodeError):
            struct_pb2.Struct.FromString(invalid_utf8)
        with self.assertRaises(DecodeError):
            from_struct_bytes(invalid_utf8)


class MutatedBytesTest(unittest.TestCase):
    """Bytes changed at random: whatever protobuf reads, the fast ways read alike, and
    what it refuses they refuse too (a sample's meta when it is read)."""

    def mutations(self, good, count=3000):
        rng = random.Random(27)
        for _ in range(count):
            buffer = bytearray(good)
            for _ in range(rng.randint(1, 3)):
                choice = rng.random()
                at = rng.randrange(len(buffer))
                if choice < 0.5:
                    buffer[at] = rng.randrange(256)
                elif choice < 0.8:
                    del buffer[at:at + rng.randint(1, 4)]
                else:
                    buffer[at:at] = bytes([rng.randrange(256)])
            yield bytes(buffer)

    def test_structs(self):
        good = to_struct({"replay_unique_id": "7-x", "weight": 0.5, "b": True,
                          "n": None}).SerializeToString()
        for buffer in self.mutations(good):
            try:
                want = plain(from_struct(nested_struct(buffer)))
            except DecodeError:
                with self.assertRaises(DecodeError, msg=buffer):
                    from_struct_bytes(buffer)
                continue
            self.assertEqual(plain(from_struct_bytes(buffer)), want, buffer)

    def test_learn_requests(self):
        good = (b"".join(encode_sample(Sample(bytes([i]) * 3, {"id": f"{i}", "w": i / 2}))
                         for i in range(3)) + encode_plan_id("plan"))
        for buffer in self.mutations(good):
            try:
                want = learner_pb2.LearnRequest.FromString(buffer)
            except DecodeError:
                with self.assertRaises(DecodeError, msg=buffer):
                    samples, _ = decode_learn_request(buffer)
                    [s.meta for s in samples]
                continue
            samples, rest = decode_learn_request(buffer)
            self.assertEqual([(s.data, plain(s.meta)) for s in samples],
                             [(s.data, plain(from_struct(s.meta))) for s in want.samples],
                             buffer)
            del want.samples[:]
            self.assertEqual(rest, want, buffer)


class ServerTest(unittest.TestCase):
    def test_learner_gets_samples_whose_meta_it_has_not_read_undecoded(self):
        class Learner:
            def __init__(self):
                self.undecoded = None
                self.metas = None

            def learn(self, samples):
                self.undecoded = ["meta" not in vars(s) for s in samples]
                self.metas = [s.meta for s in samples]
                return {"n": len(samples)}

        learner = Learner()
        with LearnerServer(learner, "127.0.0.1:0") as server, \
                AggregatorClient(f"127.0.0.1:{server.port}", timeout=testutil.LONG_WAIT) as client:
            samples = [Sample(bytes([i]) * 20, {"replay_unique_id": f"{i}-x", "weight": i / 2})
                       for i in range(64)]
            self.assertEqual(client.learn(samples, "plan-1")["info"], {"n": 64.0})
        self.assertEqual(learner.undecoded, [True] * 64)
        self.assertEqual(learner.metas, [s.meta for s in samples])


if __name__ == "__main__":
    raise SystemExit(testutil.main())
