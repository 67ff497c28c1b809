sdy.mesh @m = <["x"=256]>
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = sdy.manual_computation(%a) in_shardings=[<@m, [{"x","x","x","x","x","x","x","x"}]>] out_shardings=[<@m, [{"x","x","x","x","x","x","x","x"}]>] manual_axes={"x"} (%b: tensor<4xf32>) {
    sdy.return %b : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
