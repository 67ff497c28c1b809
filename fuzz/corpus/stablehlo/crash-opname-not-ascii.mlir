module @a attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<8x4xf32>) -> (tensor<8x4xשששששששששששששששששששששששששששששששששששששששששששששששששששששששששששf32>, tensor<16x2xf32>, tensor<8x4xf32>) {
    %0 = "s¦ablehlo.all_to_all"(%arg0) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, concat_dimension = 0 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>, split_count = 4 : i64, split_dimension = 0 : i64}> : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %1 = "stablehlo.all_to_all"(%arg0) <{channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, concat_dimension = 0 : i64, replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>, split_count = 2 : i64, split_dimension = 1 : i64}> : (tensor<8x4xf32>) -> tensor<16x2xf32>
    %2 = "stablehlo.collective_permute"(%0) <{channel_handle = #stablehlo.channel_handle<handle = 3, type = 1>, source_target_pairs = dense<[[0, 1], [1, 2], [2, 3], [3, 0]]> : tensor<4x2xi64>}> : (tensor<8x4xf32>) -> tensor<8x4xf32>
    return %0, %1, %2 : tensor<8x4xf32>, tensor<16x2xf32>, tensor<8x4xf32>
  }
}
