#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size; MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t n = 1 << 20; unsigned char *b = malloc(n);
    for (int it = 0; it < 20; it++) {
        if (rank == 0) { for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(i * 7 + it);
            MPI_Send(b, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD); MPI_Recv(b, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < n; i++) if (b[i] != (unsigned char)(i * 7 + it + 1)) { fprintf(stderr, "bad %zu\n", i); return 1; }
        } else { MPI_Recv(b, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); for (size_t i = 0; i < n; i++) b[i]++;
            MPI_Send(b, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD); }
    }
    double x = rank + 1, sum; MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("ok sum=%g\n", sum);
    MPI_Finalize(); return 0;
}
