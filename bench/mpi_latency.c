/* Open MPI point-to-point latency, for bench/compare.sh: ranks 0 and 1 ping-pong 8-byte
 * messages (a tenth of the count first, unmeasured, to warm the connection), and rank 0
 * prints "mpi_latency_us X", half the mean round trip of the measured ones.
 * Usage: mpi_latency [COUNT] (default 10000). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	int rank;
	char buf[8] = {0};
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	int n = argc > 1 ? atoi(argv[1]) : 10000;
	for (int measured = 0; measured < 2; measured++) {
		int iters = measured ? n : n / 10 + 1;
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		for (int i = 0; i < iters; i++) {
			if (rank == 0) {
				MPI_Send(buf, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
				MPI_Recv(buf, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else if (rank == 1) {
				MPI_Recv(buf, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(buf, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
			}
		}
		double t = MPI_Wtime() - t0;
		if (measured && rank == 0)
			printf("mpi_latency_us %.3f\n", t * 1e6 / (2.0 * iters));
	}
	MPI_Finalize();
	return 0;
}
