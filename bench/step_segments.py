import csv,re,statistics as S,sys
def nm(n):
    for k in ['gemv_staged_kernel','qk_norm_rope_kernel','decode_kernel','merge_kernel','tq128_kernel','embedding_kernel','logits_top_kernel','rms_norm_kernel']:
        if k in n: return k
    return n[:20]
for f in sys.argv[1:]:
    ev=sorted((int(r[0]),int(r[1]),int(r[2]),nm(r[3])) for r in list(csv.reader(open(f)))[1:])
    segs={}
    for i,e in enumerate(ev):
        if e[3]!='qk_norm_rope_kernel' or i+6>=len(ev): continue
        prev=ev[i-1]
        j=i+1; att_end=0
        while ev[j][3] in('decode_kernel','merge_kernel','tq128_kernel'):
            att_end=max(att_end,ev[j][1]); j+=1
        if j+3>=len(ev): continue
        o=ev[j]; gu=ev[j+1]; dn=ev[j+2]; qkv=ev[j+3]
        if qkv[3]!='gemv_staged_kernel' or prev[3]!='gemv_staged_kernel': continue
        d=dict(qk=(e[1]-prev[1]),att=att_end-e[1],o=o[1]-att_end,gu=gu[1]-o[1],dn=dn[1]-gu[1],qkv=qkv[1]-dn[1])
        for k,v in d.items(): segs.setdefault(k,[]).append(v/1000)
    if not segs: print(f, 'no layers'); continue
    print(f.split('/')[-1], len(segs['qk']), '  '.join(f'{k}={S.median(v):.2f}' for k,v in segs.items()), 'sum %.1f'%sum(S.median(segs[k]) for k in ['qk','att','o','gu','dn','qkv']))
