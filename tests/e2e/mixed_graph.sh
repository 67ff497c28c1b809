# mixed_graph.sh: the graph with every collective kind that mpi.sh and
# shm.sh run on their worlds of processes; sourced (POSIX sh).

# gen N OUT: every collective kind for N (2 or 4) ranks: fused AllReduce,
# AllGather and ReduceScatter buckets, float16/bfloat16/int means and
# maxima, a sub-group in reverse rank order, Reduce and Broadcast off rank
# 0, MatMul -> ReduceScatter, a MatmulReduceScatter
gen() {
  if [ "$1" -ge 4 ]; then sub="3,1"; else sub="1,0"; fi
  cat >"$2" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<graph name="mpi_mixed" version="1" world_size="$1">
  <group name="sub" ranks="$sub"/>
  <node name="a32" op="Input" dtype="float32" shape="300,257"/>
  <node name="b32" op="Input" dtype="float32" shape="1000"/>
  <node name="c16" op="Input" dtype="float16" shape="4097"/>
  <node name="dbf" op="Input" dtype="bfloat16" shape="64,33"/>
  <node name="e32" op="Input" dtype="int32" shape="77"/>
  <node name="f8"  op="Input" dtype="int8" shape="5000"/>
  <node name="gsub" op="Input" dtype="bfloat16" shape="129"/>
  <node name="h64" op="Input" dtype="float64" shape="10,3"/>
  <node name="i16" op="Input" dtype="int16" shape="31"/>
  <node name="ag" op="Input" dtype="float32" shape="3,5"/>
  <node name="ag2" op="Input" dtype="float32" shape="7"/>
  <node name="rs1" op="Input" dtype="float32" shape="32,9"/>
  <node name="rs2" op="Input" dtype="float32" shape="64"/>
  <node name="x" op="Input" dtype="float32" shape="64,32"/>
  <node name="w" op="Input" dtype="float32" shape="32,16"/>
  <node name="xb" op="Input" dtype="bfloat16" shape="32,64"/>
  <node name="wb" op="Input" dtype="bfloat16" shape="64,8"/>
  <node name="ar_a" op="AllReduce" reduction="sum" fusion="2" fusion_id="1"><input ref="a32"/></node>
  <node name="ar_b" op="AllReduce" reduction="sum" fusion="2" fusion_id="1"><input ref="b32"/></node>
  <node name="ar_c" op="AllReduce" reduction="mean" fusion="0"><input ref="c16"/></node>
  <node name="ar_d" op="AllReduce" reduction="max" fusion="0"><input ref="dbf"/></node>
  <node name="ar_e" op="AllReduce" reduction="mean" fusion="0"><input ref="e32"/></node>
  <node name="ar_f" op="AllReduce" reduction="sum" fusion="0"><input ref="f8"/></node>
  <node name="ar_g" op="AllReduce" reduction="sum" fusion="0" group="sub"><input ref="gsub"/></node>
  <node name="red"  op="Reduce" reduction="prod" root="1"><input ref="h64"/></node>
  <node name="bc"   op="Broadcast" root="1" group="sub"><input ref="i16"/></node>
  <node name="agc"  op="AllGather" layout="concat" fusion="2" fusion_id="3"><input ref="ag"/></node>
  <node name="agc2" op="AllGather" layout="concat" fusion="2" fusion_id="3"><input ref="ag2"/></node>
  <node name="ags"  op="AllGather" layout="stack"><input ref="ag"/></node>
  <node name="rsa"  op="ReduceScatter" reduction="sum" fusion="2" fusion_id="4"><input ref="rs1"/></node>
  <node name="rsb"  op="ReduceScatter" reduction="sum" fusion="2" fusion_id="4"><input ref="rs2"/></node>
  <node name="mm"   op="MatMul"><input ref="x"/><input ref="w"/></node>
  <node name="rsm"  op="ReduceScatter" reduction="sum"><input ref="mm"/></node>
  <node name="mmrs" op="MatmulReduceScatter" world_size="$1" reduction="sum"><input ref="xb"/><input ref="wb"/></node>
  <node name="o1" op="Output"><input ref="ar_a"/></node>
  <node name="o2" op="Output"><input ref="ar_b"/></node>
  <node name="o3" op="Output"><input ref="ar_c"/></node>
  <node name="o4" op="Output"><input ref="ar_d"/></node>
  <node name="o5" op="Output"><input ref="ar_e"/></node>
  <node name="o6" op="Output"><input ref="ar_f"/></node>
  <node name="o7" op="Output"><input ref="ar_g"/></node>
  <node name="o8" op="Output"><input ref="red"/></node>
  <node name="o9" op="Output"><input ref="bc"/></node>
  <node name="o10" op="Output"><input ref="agc"/></node>
  <node name="o11" op="Output"><input ref="agc2"/></node>
  <node name="o12" op="Output"><input ref="ags"/></node>
  <node name="o13" op="Output"><input ref="rsa"/></node>
  <node name="o14" op="Output"><input ref="rsb"/></node>
  <node name="o15" op="Output"><input ref="rsm"/></node>
  <node name="o16" op="Output"><input ref="mmrs"/></node>
</graph>
EOF
}
