package synth
import ("testing";"time";"math";"kvscope/engine/model";"kvscope/engine/kvstore";"kvscope/engine/tokenizer";"kvscope/engine/sample")
func TestQuick(t *testing.T){
  f,err:=Open(Demo,1); if err!=nil{t.Fatal(err)}
  m,err:=model.New(f); if err!=nil{t.Fatal(err)}
  tok,err:=tokenizer.FromGGUF(f); if err!=nil{t.Fatal(err)}
  ids:=tok.Encode("Once upon a time, there was a little girl who liked water.",true,false)
  t.Log(ids, tok.Decode(ids))
  kv,_:=kvstore.New(m.CacheConfig(16,64,kvstore.F32,kvstore.F32)); blocks:=make([]int,64); for i:=range blocks{blocks[i]=i}
  var b model.Batch; for i,id:=range ids { b.Add(id,i,blocks,true) }
  t0:=time.Now(); lg,err:=m.Forward(kv,&b); if err!=nil{t.Fatal(err)}; t.Log("prefill",time.Since(t0))
  for _,row:=range lg[len(lg)-1:] { var s,s2 float64; mx:=float32(-1e9); for _,v:=range row{s+=float64(v);s2+=float64(v)*float64(v); mx=max(mx,v)}; mean:=s/float64(len(row)); t.Log("mean",mean,"std",math.Sqrt(s2/float64(len(row))-mean*mean),"max",mx)}
  sp,_:=sample.New(sample.DefaultParams())
  out:=[]int{}; next:=sp.Sample(lg[len(lg)-1],nil); pos:=len(ids)
  t0=time.Now()
  for len(out)<100 { out=append(out,next); b.Reset(); b.Add(next,pos,blocks,true); pos++; l,err:=m.Forward(kv,&b); if err!=nil{t.Fatal(err)}; next=sp.Sample(l[0],out) }
  t.Log("decode 100", time.Since(t0))
  t.Logf("%q", tok.Decode(out))
  out=out[:0]; next=sample.Greedy(lg[len(lg)-1])
}
