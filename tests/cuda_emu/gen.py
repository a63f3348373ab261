#!/usr/bin/env python3
"""gen.py SRC.cu OUT.inc: rewrites a CUDA source of engine/cuda/ into C++ that g++ compiles
against the host CUDA emulator (emu.h); the drivers #include the result.

Why a rewrite and not a header alone: `k<<<grid, block, smem, stream>>>(args)` is not C++,
and shared memory needs a storage class the host has. The kernel files stay untouched;
everything the emulator needs is done here, on a copy:
  - k<<<cfg>>>(args)  ->  emu::launch(k, emu::cfg(cfg), args)   (balanced-paren parse)
  - extern __shared__ [__align__(n)] T name[];  ->  #define name ((T *)emu::smem)
    (the block's dynamic shared memory, a fresh NaN-filled buffer per block)
  - __shared__ T name[...];  ->  static T name[...]; emu::shared_poison(&name, sizeof name);
    blocks run one after another, so static storage is per block; the first thread of
    each block that reaches the declaration NaN-fills it
  - #include <mma.h>  ->  the emulator's mma.h; #include <cub/...>  ->  cub_emu.h
A '#line 1 "SRC"' on top keeps compiler messages pointing at the real file. Fails (exit 1)
when a construct it should have rewritten is left over."""
import re
import sys


def find_launches(s):
    """(start, end, kernel, cfg, args) of every k<<<cfg>>>(args) in s."""
    out = []
    pos = 0
    while True:
        i = s.find('<<<', pos)
        if i < 0:
            return out
        # kernel expression: an identifier with optional template arguments, backwards
        j = i
        if s[j - 1] == '>':
            depth = 0
            while True:
                j -= 1
                if s[j] == '>':
                    depth += 1
                elif s[j] == '<':
                    depth -= 1
                    if depth == 0:
                        break
        while j > 0 and (s[j - 1].isalnum() or s[j - 1] in '_:'):
            j -= 1
        kern = s[j:i]
        k = s.find('>>>', i)
        cfg = s[i + 3:k]
        if s[k + 3] != '(':
            sys.exit('gen.py: launch without arguments at %d' % k)
        depth, m = 0, k + 3
        while True:
            if s[m] == '(':
                depth += 1
            elif s[m] == ')':
                depth -= 1
                if depth == 0:
                    break
            m += 1
        args = s[k + 4:m]
        out.append((j, m + 1, kern, cfg, args))
        pos = m + 1


def rewrite(src, text):
    s = text
    s = re.sub(r'^\s*#\s*include\s*<mma\.h>', '#include "mma.h"', s, flags=re.M)
    s = re.sub(r'^\s*#\s*include\s*<cub/[^>]*>', '#include "cub_emu.h"', s, flags=re.M)
    s, n_dyn = re.subn(
        r'^[ \t]*extern[ \t]+__shared__[ \t]+(?:__align__\(\s*\d+\s*\)[ \t]*)?([\w:]+)[ \t]+(\w+)'
        r'[ \t]*\[[ \t]*\][ \t]*;', r'#define \2 ((\1 *)emu::smem)', s, flags=re.M)
    s, n_st = re.subn(
        r'\b__shared__\s+([^;{}()]*?)\b([A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)*);',
        r'static \1\2\3; emu::shared_poison(&\2, sizeof \2);', s)
    parts, last = [], 0
    launches = find_launches(s)
    for (a, b, kern, cfg, args) in launches:
        parts.append(s[last:a])
        parts.append('emu::launch(%s, emu::cfg(%s)%s)' %
                     (kern, cfg, (', ' + args) if args.strip() else ''))
        last = b
    parts.append(s[last:])
    s = ''.join(parts)
    code = re.sub(r'/\*.*?\*/|//[^\n]*', '', s, flags=re.S)
    for bad in ('<<<', '__shared__'):
        if bad in code:
            sys.exit('gen.py: %s: "%s" left after the rewrite' % (src, bad))
    sys.stderr.write('gen.py: %s: %d launches, %d dynamic and %d static shared\n' %
                     (src, len(launches), n_dyn, n_st))
    return '#line 1 "%s"\n' % src + s


def main():
    if len(sys.argv) != 3:
        sys.exit('usage: gen.py SRC.cu OUT.inc')
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        out = rewrite(src, f.read())
    with open(dst, 'w') as f:
        f.write(out)


main()
