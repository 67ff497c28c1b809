#loc1 = loc("x")
#loc2 = loc("w1")
#loc3 = loc("w2")
#loc6 = loc("jit(step)/jit(main)/shard_map/dot_general"(#loc1))
module @jit_step attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["dp"=4]>
  func.func public @main(%arg0: tensor<16x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"dp"}, {}]>} loc("x"), %arg1: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>} loc("w1"), %arg2: tensor<16x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>} loc("w2")) -> (tensor<8x16xf32> {jax.result_info = "[0]"}, tensor<16xf32> {jax.result_info = "[1]"}, tensor<16x4xf32> {jax.result_info = "[2]"}, tensor<4xf32> {jax.result_info = "[3]"}) {
    %0:4 = sdy.manual_computation(%arg0, %arg1, %arg2) in_shardings=[<@mesh, [{"dp"}, {}]>, <@mesh, [{}, {}]>, <@mesh, [{}, {}]>] out_shardings=[<@mesh, [{}, {}]>, <@mesh, [{}]>, <@mesh, [{}, {}]>, <@mesh, [{}]>] manual_axes={"dp"} (%arg3: tensor<4x8xf32> loc("x"), %arg4: tensor<8x16xf32> loc("w1"), %arg5: tensor<16x4xf32> loc("w2")) {
      %1 = stablehlo.dot_general %arg3, %arg4, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32> loc(#loc6)
      %2 = stablehlo.dot_general %1, %arg5, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x16xf32>, tensor<16x4xf32>) -> tensor<4x4xf32> loc(#loc6)
      %cst = stablehlo.constant dense<2.500000e-01> : tensor<4x4xf32> loc(#loc6)
      %3 = stablehlo.multiply %2, %cst : tensor<4x4xf32> loc(#loc6)
      %4:4 = func.call @backward(%arg3, %1, %arg5, %3) : (tensor<4x8xf32>, tensor<4x16xf32>, tensor<16x4xf32>, tensor<4x4xf32>) -> (tensor<16x4xf32>, tensor<4xf32>, tensor<8x16xf32>, tensor<16xf32>) loc(#loc6)
      // level 1: the last layer's gradients, one all-reduce each
      %5 = "stablehlo.all_reduce"(%4#0) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg6: tensor<f32> loc(unknown), %arg7: tensor<f32> loc(unknown)):
        %10 = stablehlo.add %arg6, %arg7 : tensor<f32> loc(#loc6)
        stablehlo.return %10 : tensor<f32> loc(#loc6)
      }) : (tensor<16x4xf32>) -> tensor<16x4xf32> loc(#loc6)
      %6 = "stablehlo.all_reduce"(%4#1) <{channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg6: tensor<f32> loc(unknown), %arg7: tensor<f32> loc(unknown)):
        %10 = stablehlo.add %arg6, %arg7 : tensor<f32> loc(#loc6)
        stablehlo.return %10 : tensor<f32> loc(#loc6)
      }) : (tensor<4xf32>) -> tensor<4xf32> loc(#loc6)
      // level 2: the first layer's gradients, one psum of both (a variadic all-reduce)
      %7:2 = "stablehlo.all_reduce"(%4#2, %4#3) <{channel_handle = #stablehlo.channel_handle<handle = 3, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg6: tensor<f32> loc(unknown), %arg7: tensor<f32> loc(unknown)):
        %10 = stablehlo.add %arg6, %arg7 : tensor<f32> loc(#loc6)
        stablehlo.return %10 : tensor<f32> loc(#loc6)
      }) : (tensor<8x16xf32>, tensor<16xf32>) -> (tensor<8x16xf32>, tensor<16xf32>) loc(#loc6)
      sdy.return %7#0, %7#1, %5, %6 : tensor<8x16xf32>, tensor<16xf32>, tensor<16x4xf32>, tensor<4xf32> loc(#loc6)
    } : (tensor<16x8xf32>, tensor<8x16xf32>, tensor<16x4xf32>) -> (tensor<8x16xf32>, tensor<16xf32>, tensor<16x4xf32>, tensor<4xf32>) loc(#loc6)
    return %0#0, %0#1, %0#2, %0#3 : tensor<8x16xf32>, tensor<16xf32>, tensor<16x4xf32>, tensor<4xf32> loc(#loc)
  } loc(#loc)
  func.func private @backward(%arg0: tensor<4x8xf32>, %arg1: tensor<4x16xf32>, %arg2: tensor<16x4xf32>, %arg3: tensor<4x4xf32>) -> (tensor<16x4xf32>, tensor<4xf32>, tensor<8x16xf32>, tensor<16xf32>) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32> loc(#loc6)
    %0 = stablehlo.dot_general %arg1, %arg3, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x16xf32>, tensor<4x4xf32>) -> tensor<16x4xf32> loc(#loc6)
    %1 = stablehlo.reduce(%arg3 init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<4x4xf32>, tensor<f32>) -> tensor<4xf32> loc(#loc6)
    %2 = stablehlo.dot_general %arg3, %arg2, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<4x4xf32>, tensor<16x4xf32>) -> tensor<4x16xf32> loc(#loc6)
    %3 = stablehlo.dot_general %arg0, %2, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<8x16xf32> loc(#loc6)
    %4 = stablehlo.reduce(%2 init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<4x16xf32>, tensor<f32>) -> tensor<16xf32> loc(#loc6)
    return %0, %1, %3, %4 : tensor<16x4xf32>, tensor<4xf32>, tensor<8x16xf32>, tensor<16xf32> loc(#loc6)
  } loc(#loc6)
} loc(#loc)
#loc = loc(unknown)
