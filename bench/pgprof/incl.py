#!/usr/bin/env python3
# inclusive counts of named frames among writer samples whose chain contains MARK
import sys, collections
mark = sys.argv[1]; listen=set()
for line in open(sys.argv[2]):
    p=line.split('|')
    if len(p)>=3 and p[2].startswith('LISTEN'): listen.add(p[0])
c=collections.Counter(); n=0; tot=0
pid=None; syms=[]
def flush():
    global n, tot
    if pid is None or pid in listen: return
    tot+=1
    if mark in syms:
        n+=1
        for s in set(syms):
            if not s.startswith('[') and not s.startswith('0x'): c[s]+=1
for line in sys.stdin:
    line=line.rstrip('\n')
    if not line.strip():
        flush(); pid=None; syms=[]; continue
    if not line.startswith('\t'):  # the header: the pid, right-aligned
        flush(); syms=[]; pid=line.split('/')[0].strip(); continue
    parts=line.strip().split(None,1)
    if len(parts)==2: syms.append(parts[1].replace(' (inlined)',''))
flush()
print(f"{mark}: {n} of {tot} writer samples ({100*n/tot:.1f}%)")
for s,k in c.most_common(int(sys.argv[3]) if len(sys.argv)>3 else 60):
    print(f"  {100*k/tot:5.1f}%  {s}")
