func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.while(%x = %a) : tensor<4xf32>
   cond {
    %c = stablehlo.constant dense<true> : tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %1 = stablehlo.add %x, %b : tensor<4xf32>
    stablehlo.return %1 : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}
