// MLIR's pretty forms of region and attribute ops (issue 32): reduce ... reducer(...),
// while cond/do, if, iota, transpose, slice, composite, select's 'P, T' types.
func.func @main(%arg0: tensor<1x6xi64>, %arg1: tensor<i64>, %pred: tensor<i1>) -> (tensor<1xi64>, tensor<i64>, tensor<i64>) {
  %0 = stablehlo.reduce(%arg0 init: %arg1) across dimensions = [1] : (tensor<1x6xi64>, tensor<i64>) -> tensor<1xi64>
   reducer(%arg2: tensor<i64>, %arg3: tensor<i64>)  {
    %1 = stablehlo.add %arg2, %arg3 : tensor<i64>
    stablehlo.return %1 : tensor<i64>
  }
  %2:2 = stablehlo.while(%iterArg = %arg1, %iterArg_0 = %arg1) : tensor<i64>, tensor<i64>
   cond {
    %3 = stablehlo.compare  LT, %iterArg, %iterArg_0,  SIGNED : (tensor<i64>, tensor<i64>) -> tensor<i1>
    stablehlo.return %3 : tensor<i1>
  } do {
    %4 = stablehlo.add %iterArg, %iterArg_0 : tensor<i64>
    stablehlo.return %4, %iterArg_0 : tensor<i64>, tensor<i64>
  }
  %5 = "stablehlo.if"(%pred) ({
    stablehlo.return %arg1 : tensor<i64>
  }, {
    stablehlo.return %arg1 : tensor<i64>
  }) : (tensor<i1>) -> tensor<i64>
  %6 = stablehlo.iota dim = 0 : tensor<4xi64>
  %7 = stablehlo.transpose %arg0, dims = [1, 0] : (tensor<1x6xi64>) -> tensor<6x1xi64>
  %8 = stablehlo.slice %arg0 [0:1, 1:4:2] : (tensor<1x6xi64>) -> tensor<1x2xi64>
  %9 = stablehlo.dynamic_slice %arg0, %arg1, %arg1, sizes = [1, 2] : (tensor<1x6xi64>, tensor<i64>, tensor<i64>) -> tensor<1x2xi64>
  %10 = stablehlo.composite "my.op" %arg1 {decomposition = @main} : (tensor<i64>) -> tensor<i64>
  %11 = stablehlo.concatenate %arg0, %arg0, dim = 0 : (tensor<1x6xi64>, tensor<1x6xi64>) -> tensor<2x6xi64>
  %12 = stablehlo.dot_general %arg0, %7, contracting_dims = [1] x [0] : (tensor<1x6xi64>, tensor<6x1xi64>) -> tensor<1x1xi64>
  %13 = stablehlo.select %pred, %arg1, %arg1 : tensor<i1>, tensor<i64>
  %14 = stablehlo.optimization_barrier %arg1 : tensor<i64>
  %15 = shape.const_shape [1, 6] : tensor<2xindex>
  return %0, %2#0, %5 : tensor<1xi64>, tensor<i64>, tensor<i64>
}
