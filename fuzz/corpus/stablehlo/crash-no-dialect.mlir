// a moduletype without `module`: found by func.func
func.func @main(%arg0: tensor<4xf32>, %arg1: tensor<2x2xbf16>, %p: tensor<4xi1>) -> (tensor<4xf32>, tensor<4xbf16>) {
  %0 = "stablehlo.add"(%arg0, %arg0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = stablehlo.subtract %0, %arg0 : tensor<4xf32>
  %2 = stablehlo.convert %1 : (tensor<4xf32>) -> tensor<2xf64>
  %3 = stablehlo.reshape %arg1 : (tensor<2x2xbf16>) -> tensor<4xbf16>
  %c = stablehlo.constant dense<[0, 1, 2, 3]> : tensor<4xi32>
  %c_0 = stablehlo.constant dense<"0x000080;F0000803F0000803F0000803F"> : tensor<4xf32>
  %c_1 = stablehlo.constant dense<0x7FC00000> : tensor<f32>
  %c_2 = constant dense<[1.5, 2.5, 1.5, 1.5]> : tensor<4xf32>
  %c_3 = "stablehlo.constant"() <{value = dense<t  2:>ensor<2x2xi64>}> : () -> tensor<2x2xi64>
  %4 = stablehlo.multiply %c_0, %c_2 : tensor<4xf32> loc("m")
  %5 = stablehlo.not %p : tensor<4xi1>
  %6 = sdy.sharding_constraint %4 <@mesh, [{}]> : tensor<4xf32>
  %7 = stablehlo.custom_call @Sharding(%6) {mhlo.sharding = "{replicated}"} : (tensor<4xf32>) -> tensor<4xf32>
  %8:2 = stablehlo.while(%iterArg = %c, %iterArg_4 = %7) : tensor<4xi32>, tensor<4xf32>
   cond {
    %9 = stablehlo.compare  LT, %iterArg, %iterArg,  SIGNED : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi1>
    stablehlo.return %9 : tensor<4xi1>
  } do {
    %9 = stablehlo.add %iterArg_4, %2x : tensor<4xf32>
    stablehlo.return %iterArg, %9 : tensor<4xi32>, tensor<4xf32>
  }
  return %8#1, %3 : tensor<4xf32>, tensor<4xbf16>
}
