/* env.c - every environment variable collfuse reads, in one table.
 *
 * As NCCL's NCCL_PARAM: a variable is a row (name, the kind of value, its
 * default, one line of meaning), and code reads it through cf_env with the
 * row's index, never with a raw getenv. The man page's ENVIRONMENT section
 * (tools/gendocs.c) and docs/cli.md's "Environment" table (tests/
 * gen_env_doc.c, checked by ctest e2e/doc_env) are written from the same
 * rows, so a new knob is documented where it is declared. The meanings use
 * `backticks` for literal words, which each writer renders its own way.
 */
#include "ir.h"

#include <stdlib.h>

const cf_env_knob cf_env_table[CF_ENV_COUNT] = {
    [CF_ENV_VERBOSE] = {"COLLFUSE_VERBOSE", "any", "quiet",
                        "set: print the library's informational messages on stderr too"},
    [CF_ENV_CACHE] = {"COLLFUSE_CACHE", "directory, or `off`", "`$XDG_CACHE_HOME/collfuse`",
                      "directory of the JIT kernel object cache (an absolute path; the user's own "
                      "and writable by no one else, else ignored with a warning: kernels.md), or "
                      "`off`, `0`, `no`, `false`: no cache"},
    [CF_ENV_XDG_CACHE] = {"XDG_CACHE_HOME", "directory", "`~/.cache`",
                          "without `COLLFUSE_CACHE`, the kernel cache is `$XDG_CACHE_HOME/collfuse` "
                          "(an absolute path; else `~/.cache/collfuse`)"},
    [CF_ENV_PROFILE] = {"COLLFUSE_PROFILE", "file", "`$XDG_CONFIG_HOME/collfuse/profile`",
                        "the measured profile that `run`, `compile` and the API read without "
                        "`--profile` (executor.md, \"Profiles\"); a named file must exist"},
    [CF_ENV_XDG_CONFIG] = {"XDG_CONFIG_HOME", "directory", "`~/.config`",
                           "without `COLLFUSE_PROFILE`, the profile is "
                           "`$XDG_CONFIG_HOME/collfuse/profile` when it is there"},
    [CF_ENV_HOME] = {"HOME", "directory", "unset",
                     "without `XDG_CACHE_HOME`, the kernel cache is `$HOME/.cache/collfuse` "
                     "(when it is an absolute path), and without `XDG_CONFIG_HOME` the profile "
                     "is `$HOME/.config/collfuse/profile`; unset: neither"},
    [CF_ENV_STREAM_MIN] = {"COLLFUSE_STREAM_MIN", "bytes (`K`, `M`, `G`), or `off`",
                           "the last-level cache's size + 1",
                           "the working set from which an out-of-place AllReduce writes outputs of "
                           "4 MiB or more with streaming stores (a graph's calls count as larger "
                           "than any), or `off`: never (executor.md, \"Streaming stores\")"},
    [CF_ENV_BIND] = {"COLLFUSE_BIND", "`none`", "bound",
                     "`none`: leave rank threads where the scheduler puts them; otherwise the "
                     "threads transport binds each rank's threads to a CPU of the process's "
                     "affinity mask: its own (two where there are two per rank: one for its "
                     "compute, one for its collectives), round robin when there are fewer CPUs "
                     "than ranks (executor.md, \"Placement\")"},
    [CF_ENV_BLAS_THREADS] = {"OPENBLAS_NUM_THREADS", "count", "the cores shared by the ranks",
                             "OpenBLAS threads per MatMul; by default collfuse divides the cores "
                             "among the ranks (of one process, or of a host's MPI processes)"},
    [CF_ENV_CUDA_DRIVER] = {"COLLFUSE_CUDA_DRIVER", "library", "`libcuda.so.1`",
                            "the CUDA driver library to load instead of `libcuda.so.1`"},
    [CF_ENV_CUBLAS] = {"CUBLAS_LIBRARY", "file or folder, or `none`", "the system's",
                       "cuBLAS for `--device cuda`: a file or a folder holding `libcublas.so.*`; "
                       "`none` turns cuBLAS off"},
    [CF_ENV_SHM_RANK] = {"COLLFUSE_RANK", "rank", "from the launcher's variables",
                         "`--backend shm`: this process's rank (with `COLLFUSE_WORLD_SIZE`); "
                         "`run --ranks N` sets it in the processes it starts (executor.md, "
                         "\"The shm world\")"},
    [CF_ENV_SHM_SIZE] = {"COLLFUSE_WORLD_SIZE", "count", "from the launcher's variables",
                         "`--backend shm`: the processes of the job (with `COLLFUSE_RANK`)"},
    [CF_ENV_SHM_JOB] = {"COLLFUSE_JOB", "name", "the launcher's job, else the parent process",
                        "`--backend shm`: the name the job's processes meet under (a Unix socket "
                        "in the abstract namespace, the user's own); processes of one job share it"},
    [CF_ENV_TORCH_RANK] = {"RANK", "rank", "unset",
                           "torchrun's: this process's rank in a `--backend shm` world"},
    [CF_ENV_TORCH_SIZE] = {"WORLD_SIZE", "count", "unset",
                           "torchrun's: the processes of a `--backend shm` world"},
    [CF_ENV_TORCH_LOCAL_SIZE] = {"LOCAL_WORLD_SIZE", "count", "unset",
                                 "torchrun's: below `WORLD_SIZE`, the job spans hosts and "
                                 "`--backend shm` refuses it"},
    [CF_ENV_MASTER_ADDR] = {"MASTER_ADDR", "host", "unset",
                            "torchrun's: with `MASTER_PORT`, names the job a `--backend shm` "
                            "world meets under"},
    [CF_ENV_MASTER_PORT] = {"MASTER_PORT", "port", "unset", "torchrun's: see `MASTER_ADDR`"},
    [CF_ENV_OMPI_RANK] = {"OMPI_COMM_WORLD_RANK", "rank", "unset",
                          "Open MPI's mpirun: this process's rank in a `--backend shm` world"},
    [CF_ENV_OMPI_SIZE] = {"OMPI_COMM_WORLD_SIZE", "count", "unset",
                          "Open MPI's mpirun: the processes of a `--backend shm` world"},
    [CF_ENV_OMPI_LOCAL_SIZE] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "count", "unset",
                                "Open MPI's mpirun: below the world's size, the job spans hosts "
                                "and `--backend shm` refuses it"},
    [CF_ENV_OMPI_BTL] = {"OMPI_MCA_btl", "Open MPI's list", "Open MPI's",
                         "`--backend mpi`: where it leaves out shared memory (`vader`, `sm`) the "
                         "MPI world treats its ranks as on different hosts (network message sizes "
                         "and `auto`'s network rules), as it does when they are"},
    [CF_ENV_PMIX_NAMESPACE] = {"PMIX_NAMESPACE", "name", "unset",
                               "PMIx's job name: names the job a `--backend shm` world meets under"},
    [CF_ENV_PMI_RANK] = {"PMI_RANK", "rank", "unset",
                         "MPICH's (PMI) rank of a `--backend shm` world"},
    [CF_ENV_PMI_SIZE] = {"PMI_SIZE", "count", "unset",
                         "MPICH's (PMI) processes of a `--backend shm` world"},
    [CF_ENV_SLURM_PROCID] = {"SLURM_PROCID", "rank", "unset",
                             "srun's: this process's rank in a `--backend shm` world"},
    [CF_ENV_SLURM_NTASKS] = {"SLURM_NTASKS", "count", "unset",
                             "srun's: the processes of a `--backend shm` world"},
    [CF_ENV_SLURM_NNODES] = {"SLURM_NNODES", "count", "unset",
                             "srun's: above 1, the job spans hosts and `--backend shm` refuses it"},
    [CF_ENV_SLURM_JOB_ID] = {"SLURM_JOB_ID", "number", "unset",
                             "srun's: with `SLURM_STEP_ID`, names the job a `--backend shm` world "
                             "meets under"},
    [CF_ENV_SLURM_STEP_ID] = {"SLURM_STEP_ID", "number", "unset", "srun's: see `SLURM_JOB_ID`"},
    [CF_ENV_SHM_HUGE] = {"COLLFUSE_SHM_HUGE", "`0`", "huge pages",
                         "`0`: the shm world's heaps in 4 KiB pages; otherwise in 2 MiB pages where "
                         "Linux gives them (executor.md, \"The shm world\")"},
    [CF_ENV_SHM_SPIN] = {"COLLFUSE_SHM_SPIN", "`yield` or `pause`", "`yield`",
                         "`--backend shm` with more ranks than cores: how a wait polls before it "
                         "sleeps; `pause` never yields, for a machine busy with other work "
                         "(executor.md, \"Waits, faults\")"},
    [CF_ENV_SHM_CORES] = {"COLLFUSE_SHM_CORES", "a number", "the CPUs of the process's affinity mask",
                          "`--backend shm`: the cores its ranks share (the job takes the fewest "
                          "any rank counts); with more ranks than that, waits poll as "
                          "`COLLFUSE_SHM_SPIN` says, `auto` picks `pool` from 4 MiB, and only that "
                          "many ranks reduce a `pool` call of 4 MiB or more while the others sleep "
                          "(executor.md, \"Idle ranks\")"},
    [CF_ENV_HOSTID] = {"COLLFUSE_HOSTID", "name", "the host's name and boot id",
                       "`--backend shm`: this process's host as the job's ranks compare it (as "
                       "`NCCL_HOSTID`); ranks with different ones are on different hosts; at most 64 "
                       "characters (a host's name's most)"},
    [CF_ENV_RENDEZVOUS] = {"COLLFUSE_RENDEZVOUS", "host:port", "`MASTER_ADDR`:`MASTER_PORT`+1",
                           "`--backend shm`: the TCP address where rank 0 meets the other ranks "
                           "first, so that ranks on other hosts are named, not timed out; "
                           "without it and torchrun's variables, a Unix socket of this host"},
    [CF_ENV_PATH] = {"PATH", "directories", "`/usr/bin:/bin`",
                     "`bench allreduce` finds `mpirun` for its `MPI_Allreduce` peer there"},
};

const char *cf_env(cf_env_var v) { return getenv(cf_env_table[v].name); }
