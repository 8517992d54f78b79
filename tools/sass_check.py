#!/usr/bin/env python3
"""sass_check.py: look in built CUDA code for copies whose L2 cache policy reads a register nothing sets.

The ptxas of early CUDA 13 releases (13.0 among them) can drop the `createpolicy` that feeds cp.async's L2 cache
hint (FDEC_CP_EVICT_FIRST, src/cuda/common.cuh) and leave the copy (SASS `LDGSTS ... desc[URn]`) reading a uniform
register pair that no instruction of the kernel writes; the GPU traps with "illegal instruction", or not, depending on
what the register held. Every copy this check flagged was of a kernel that trapped on an H200, and no kernel it
passed ever did.

Usage: cuobjdump -sass FILE | tools/sass_check.py     (exit 1 and one line per flagged copy; 0 when none)
`make check-sass` runs it over the library's device code (cuobjdump and nvdisasm from the CUDA toolkit, or from
PyPI's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm)."""
import re
import sys


def flagged(sass):
    """(kernel, instruction) for each instruction reading desc[URn] where URn or URn+1 is written nowhere in its kernel"""
    out = []
    parts = re.split(r'\n\s*Function : (\S+)', sass)
    for name, body in zip(parts[1::2], parts[2::2]):
        written, uses = set(), []
        for ins in re.findall(r'/\*[0-9a-f]{4,}\*/\s+([^;]*);', body):
            ins = re.sub(r'^@!?U?P\w+\s+', '', ins.strip())  # the predicate
            m = re.match(r'(\S+)\s+UR(\d+)\b', ins)  # an instruction whose destination is a uniform register
            if m and (m.group(1).startswith('U') or m.group(1).startswith(('S2UR', 'R2UR'))):
                n = int(m.group(2))
                written.add(n)
                if {'64', 'WIDE'} & set(m.group(1).split('.')[1:]):  # ULDC.64, UIMAD.WIDE: a pair (not USHF.U64)
                    written.add(n + 1)
            uses += [(int(n), ins) for n in re.findall(r'desc\[UR(\d+)\]', ins)]
        out += [(name, ins) for n, ins in uses if n not in written or n + 1 not in written]
    return out


def main():
    text = sys.stdin.read()
    if 'Function :' not in text:
        print('sass_check: no SASS on the input (cuobjdump -sass FILE | sass_check.py)', file=sys.stderr)
        return 2
    bad = flagged(text)
    for name, ins in bad:
        print('%s: %s' % (name, ins))
    n = len(re.findall(r'\n\s*Function : ', text))
    print('sass_check: %d kernels, %d copies whose cache policy register is never set' % (n, len(bad)),
          file=sys.stderr)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
