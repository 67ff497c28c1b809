sdy.mesh @m0 = <["x"=2]>
sdy.mesh @m1 = <["x"=2]>
sdy.mesh @m2 = <["x"=2]>
sdy.mesh @m3 = <["x"=2]>
sdy.mesh @m4 = <["x"=2]>
sdy.mesh @m5 = <["x"=2]>
sdy.mesh @m6 = <["x"=2]>
sdy.mesh @m7 = <["x"=2]>
sdy.mesh @m8 = <["x"=2]>
sdy.mesh @m9 = <["x"=2]>
sdy.mesh @m10 = <["x"=2]>
sdy.mesh @m11 = <["x"=2]>
sdy.mesh @m12 = <["x"=2]>
sdy.mesh @m13 = <["x"=2]>
sdy.mesh @m14 = <["x"=2]>
sdy.mesh @m15 = <["x"=2]>
sdy.mesh @m16 = <["x"=2]>
sdy.mesh @m17 = <["x"=2]>
sdy.mesh @m18 = <["x"=2]>
sdy.mesh @m19 = <["x"=2]>
sdy.mesh @m20 = <["x"=2]>
sdy.mesh @m21 = <["x"=2]>
sdy.mesh @m22 = <["x"=2]>
sdy.mesh @m23 = <["x"=2]>
sdy.mesh @m24 = <["x"=2]>
sdy.mesh @m25 = <["x"=2]>
sdy.mesh @m26 = <["x"=2]>
sdy.mesh @m27 = <["x"=2]>
sdy.mesh @m28 = <["x"=2]>
sdy.mesh @m29 = <["x"=2]>
sdy.mesh @m30 = <["x"=2]>
sdy.mesh @m31 = <["x"=2]>
sdy.mesh @m32 = <["x"=2]>
sdy.mesh @m33 = <["x"=2]>
sdy.mesh @m34 = <["x"=2]>
sdy.mesh @m35 = <["x"=2]>
sdy.mesh @m36 = <["x"=2]>
sdy.mesh @m37 = <["x"=2]>
sdy.mesh @m38 = <["x"=2]>
sdy.mesh @m39 = <["x"=4]>
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = sdy.manual_computation(%a) in_shardings=[<@m39, [{"x"}]>] out_shardings=[<@m39, [{"x"}]>] manual_axes={"x"} (%b: tensor<1xf32>) {
    sdy.return %b : tensor<1xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
