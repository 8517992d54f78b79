#!/usr/bin/env python3
"""Writes the hand-made drift inputs of this folder : fuzz_decode_cuda inputs in the style of
fuzz/corpus/cuda-f32-drift-d1-h28-68k, whose fuzz bytes end in 94 ff, so that every q, K and V element is those two
bytes (with the harness's finite mask: f32 q ~0.0045, f16 K and V 0x3b94 ~0.944), K and V varied by the harness's
salt every 61 bytes: nearly equal weights over nearly equal V. They reach more K elements than a fuzzer's case may,
so the driver needs -max-kv:  build/fuzz_decode_cuda_driver -max-kv 300000000 -seconds 0 fuzz/findings/FILE

    python3 fuzz/findings/make_drift_inputs.py fuzz/findings
"""
import sys


def case(D, H, G, L, kv):
    b = bytes([0x32]) + D.to_bytes(2, 'big')                        # head_dim (a small pick: % 521)
    b += bytes([0xd3]) + H.to_bytes(2, 'big') + bytes([0xd3]) + G.to_bytes(2, 'big')  # heads (a 2-byte pick)
    b += bytes([0x1c, 0x20, 0xfa, 0x02, 0x2e])                      # scale bytes, then < 128: scale 0 (1/sqrt(D))
    b += bytes([0x6e, 0, 0, 0])                                      # window 0, no ring
    b += bytes([0, kv, 0, 0, 0])                                     # q f32, K/V kv, out f32; dense strides
    b += bytes([0xe7]) + L.to_bytes(4, 'big')                        # seq_len, 4 bytes
    b += bytes([0xb5, 0x66, 0x94, 0xff])                             # the second context, finite; the data bytes
    return b


for D, H, G, kv in [(64, 32, 8, 1), (128, 32, 8, 1), (256, 16, 8, 1), (512, 16, 2, 1), (128, 64, 8, 1),
                    (128, 32, 8, 0), (64, 32, 8, 2), (128, 32, 8, 2)]:  # kv: 0 f32, 1 f16, 2 bf16
    with open(f"{sys.argv[1]}/cuda-drift-d{D}-h{H}-g{G}-{['f32', 'f16', 'bf16'][kv]}-131072", "wb") as f:
        f.write(case(D, H, G, 131072, kv))
