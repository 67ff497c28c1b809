func.func @main(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<8xi32> {jax.result_info = "r"}) {
  %0:2 = func.call @f(%a) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<8xi32>)
  return %0#0, %0#1 : tensor<4xf32>, tensor<8xi32>
}
func.func private @f(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<8xi32>) {
  return %a, %a : tensor<4xf32>, tensor<4xf32>
}
