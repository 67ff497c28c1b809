// The forms of a JAX data-parallel step as MLIR prints them (issue 32): a
// functional type without parentheses, reduce ... applies, broadcast_in_dim
// with dims = [], a multi-result func.call used as %70#0, chlo and arith ops.
module @jit_step attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 8 : i32} {
  func.func public @main(%arg0: tensor<1x32x256xf32>, %arg1: tensor<256xf32>) -> (tensor<1x32xf32>, tensor<256xf32>) {
    %70:2 = func.call @helper(%arg0, %arg1) : (tensor<1x32x256xf32>, tensor<256xf32>) -> (tensor<1x32x256xf32>, tensor<256xf32>)
    %71 = chlo.square %70#0 : tensor<1x32x256xf32> -> tensor<1x32x256xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %72 = stablehlo.reduce(%71 init: %cst) applies stablehlo.add across dimensions = [2] : (tensor<1x32x256xf32>, tensor<f32>) -> tensor<1x32xf32>
    %73 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<256xf32>
    %74 = stablehlo.add %70#1, %73 : tensor<256xf32>
    %75 = "stablehlo.all_reduce"(%74) <{replica_groups = dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<256xf32>) -> tensor<256xf32>
    %76 = stablehlo.sqrt %75 : tensor<256xf32>
    %77 = arith.constant dense<1.0> : tensor<256xf32>
    return %72, %76 : tensor<1x32xf32>, tensor<256xf32>
  }
  func.func private @helper(%x: tensor<1x32x256xf32>, %y: tensor<256xf32>) -> (tensor<1x32x256xf32>, tensor<256xf32>) {
    %0 = stablehlo.tanh %x : tensor<1x32x256xf32>
    return %0, %y : tensor<1x32x256xf32>, tensor<256xf32>
  }
}
