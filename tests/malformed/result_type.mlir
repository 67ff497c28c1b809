func.func @main(%a: tensor<4xf32>) -> tensor<8xi32> {
  return %a : tensor<4xf32>
}
