module @m {
  sdy.mesh @mesh = <["x"=2, "y"=2]>
  func.func private @f(%a: tensor<2x4xf32>) -> tensor<2x4xf32> {
    %0 = call @g(%a) : (tensor<2x4xf32>) -> tensor<2x4xf32>
    return %0 : tensor<2x4xf32>
  }
  func.func private @g(%a: tensor<2x4xf32>) -> tensor<2x4xf32> {
    %0 = stablehlo.multiply %a, %a : tensor<2x4xf32>
    return %0 : tensor<2x4xf32>
  }
  func.func public @step(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x"}, {"y", ?}]>] out_shardings=[<@mesh, [{"x"}, {"y"}]>] manual_axes={"x", "y"} (%arg1: tensor<2x4xf32>) {
      %1 = func.call @f(%arg1) : (tensor<2x4xf32>) -> tensor<2x4xf32>
      %2 = func.call @f(%1) : (tensor<2x4xf32>) -> tensor<2x4xf32>
      sdy.return %2 : tensor<2x4xf32>
    } : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %0 : tensor<4x8xf32>
  }
}
