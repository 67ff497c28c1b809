module @m0 {
module @m1 {
module @m2 {
module @m3 {
module @m4 {
module @m5 {
module @m6 {
module @m7 {
module @m8 {
module @m9 {
module @m10 {
module @m11 {
module @m12 {
module @m13 {
module @m14 {
module @m15 {
module @m16 {
module @m17 {
module @m18 {
module @m19 {
module @m20 {
module @m21 {
module @m22 {
module @m23 {
module @m24 {
module @m25 {
module @m26 {
module @m27 {
module @m28 {
module @m29 {
module @m30 {
module @m31 {
module @m32 {
module @m33 {
module @m34 {
module @m35 {
module @m36 {
module @m37 {
module @m38 {
module @m39 {
module @m40 {
module @m41 {
module @m42 {
module @m43 {
module @m44 {
module @m45 {
module @m46 {
module @m47 {
module @m48 {
module @m49 {
module @m50 {
module @m51 {
module @m52 {
module @m53 {
module @m54 {
module @m55 {
module @m56 {
module @m57 {
module @m58 {
module @m59 {
sdy.mesh @mesh = <["x"=2]>
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
}
