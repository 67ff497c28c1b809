sdy.mesh @mesh = <["x"=2]>
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
%m0 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m1 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m2 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m3 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m4 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m5 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m6 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m7 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m8 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m9 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m10 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m11 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m12 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m13 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m14 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m15 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m16 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m17 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m18 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
%m19 = sdy.manual_computation(%a) in_shardings=[<@mesh, [{}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"x"} (%a: tensor<4xf32>) {
  %v = stablehlo.add %a, %a : tensor<4xf32>
  sdy.return %v : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m19 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m18 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m17 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m16 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m15 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m14 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m13 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m12 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m11 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m10 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m9 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m8 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m7 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m6 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m5 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m4 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m3 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m2 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
sdy.return %m1 : tensor<4xf32>
} : (tensor<4xf32>) -> tensor<4xf32>
return %m0 : tensor<4xf32>
}
