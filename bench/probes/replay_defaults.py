#!/usr/bin/env python3
"""Replays a build's kernel choices against a tuning run's records, with no GPU:
each conv/dense kernel the build picked (its symbol carries the task and config)
is looked up among the configs the tuner measured for that task.

  aotune dump MODEL --section tasks --batch B --precision P > tasks.txt
  aotune build MODEL --batch B --precision P --no-nvcc --out DIR
  replay_defaults.py RECORDS.jsonl DIR/aotune/<name>/kernels.cu tasks.txt

Prints, per kernel: task, config tag, its measured µs (None if never measured),
the task's best measured µs and weight; then the weight-summed µs of the picks
that were measured. Used to check a change of the default rule against
measurements before timing it end to end.
"""
import json,re,sys,collections
recs=[json.loads(l) for l in open(sys.argv[1])]
def tag(c):
    d='d' if c.get('epilogue')=='direct' else ''
    k=c.get('kernel')
    if k=='wgmma': return f"wgmma_m{c['block_m']}n{c['block_n']}p{c['stages']}s{c['split_k']}{d}"
    if k=='mma': return f"mma_m{c['block_m']}n{c['block_n']}k{c['block_k']}w{c['warps_m']}x{c['warps_n']}p{c['stages']}s{c['split_k']}{d}"
    return None
meas=collections.defaultdict(dict)
for r in recs:
    if r.get('median_us') is None or r.get('failure'): continue
    t=tag(r['config'])
    if t: meas[r['task'][:8]][t]=r['median_us']
weights={}
for l in open(sys.argv[3]):
    p=l.split()
    if len(p)>3 and p[1] in ('FusedConv','Dense'): weights[p[0][:8]]=int(p[2])
src=open(sys.argv[2]).read()
tot=0; miss=0; rows=[]
for m in re.finditer(r'void __launch_bounds__\([0-9, ]*\) (conv|dense)_([0-9a-f]{8})_(\w+)\(', src):
    h, t = m.group(2), m.group(3)
    us=meas[h].get(t)
    best=min(meas[h].values()) if meas[h] else None
    w=weights.get(h,1)
    if us is None: miss+=1
    else: tot+=w*us
    rows.append((h,t,us,best,w))
for r in rows: print(*r)
print('weighted sum of measured picks', round(tot,1), 'unmeasured picks', miss)
