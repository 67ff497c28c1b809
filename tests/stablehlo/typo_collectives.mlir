func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %1 = "stablehlo.all_reduse"(%arg0) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = stablehlo.al_gather %arg0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}
