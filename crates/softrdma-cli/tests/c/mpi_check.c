/* MPI over softrdma, every byte checked: point-to-point (a ring, and a ping-pong sweep
 * from 1 B to 1 MiB between ranks 0 and 1), MPI_Allreduce, MPI_Alltoall, and one-sided
 * MPI_Put / MPI_Get in a window of fences. Prints "mpi_check ok ranks=N" on rank 0 when
 * all of it held; exits 1 with the first wrong byte otherwise. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static unsigned char pat(int from, int round, size_t i) {
    return (unsigned char)(from * 31 + round * 7 + i * 13 + (i >> 8));
}

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "rank %d: ", rank);                              \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
            MPI_Abort(MPI_COMM_WORLD, 1);                                    \
        }                                                                    \
    } while (0)

static void check_buf(const unsigned char *b, size_t n, int from, int round, const char *what) {
    for (size_t i = 0; i < n; i++)
        CHECK(b[i] == pat(from, round, i), "%s: byte %zu of %zu from rank %d is %u, not %u",
              what, i, n, from, b[i], pat(from, round, i));
}

static void fill(unsigned char *b, size_t n, int from, int round) {
    for (size_t i = 0; i < n; i++) b[i] = pat(from, round, i);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const size_t max = 1 << 20;
    unsigned char *s = malloc(max), *r = malloc(max);
    CHECK(s && r, "out of memory");

    /* A ring: each rank sends to the next and receives from the one before. */
    for (size_t n = 1; n <= max; n *= 16) {
        int to = (rank + 1) % size, from = (rank + size - 1) % size;
        fill(s, n, rank, (int)n);
        memset(r, 0, n);
        MPI_Sendrecv(s, (int)n, MPI_BYTE, to, 1, r, (int)n, MPI_BYTE, from, 1, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        check_buf(r, n, from, (int)n, "ring");
    }

    /* A ping-pong sweep between ranks 0 and 1, every power of two from 1 B to 1 MiB. */
    if (size > 1 && rank < 2) {
        int peer = 1 - rank;
        for (size_t n = 1; n <= max; n *= 2) {
            for (int it = 0; it < 4; it++) {
                int round = (int)n + it;
                if (rank == 0) {
                    fill(s, n, 0, round);
                    MPI_Send(s, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
                    memset(r, 0, n);
                    MPI_Recv(r, (int)n, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    check_buf(r, n, 1, round, "pong");
                } else {
                    memset(r, 0, n);
                    MPI_Recv(r, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    check_buf(r, n, 0, round, "ping");
                    fill(s, n, 1, round);
                    MPI_Send(s, (int)n, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
                }
            }
        }
        if (rank == 0) printf("sweep 1 B to 1 MiB ok\n");
    }

    /* Allreduce of a vector: element i sums to size*i + size*(size-1)/2. */
    {
        enum { N = 4096 };
        static int64_t in[N], out[N];
        for (int i = 0; i < N; i++) in[i] = (int64_t)i + rank;
        MPI_Allreduce(in, out, N, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < N; i++)
            CHECK(out[i] == (int64_t)size * i + (int64_t)size * (size - 1) / 2,
                  "allreduce: element %d is %lld", i, (long long)out[i]);
    }

    /* Alltoall: block j of rank i's send buffer goes to rank j as its block i. */
    {
        const size_t blk = 64 * 1024;
        unsigned char *a = malloc(blk * size), *b = malloc(blk * size);
        CHECK(a && b, "out of memory");
        for (int j = 0; j < size; j++) fill(a + blk * j, blk, rank, j);
        memset(b, 0, blk * size);
        MPI_Alltoall(a, (int)blk, MPI_BYTE, b, (int)blk, MPI_BYTE, MPI_COMM_WORLD);
        for (int i = 0; i < size; i++) check_buf(b + blk * i, blk, i, rank, "alltoall");
        free(a);
        free(b);
    }

    /* One-sided: each rank puts a block into the next rank's window, then gets one back
     * from the rank before; in fenced epochs, or with MPI_CHECK_RMA=lock in passive-target
     * epochs (MPI_Win_lock), which Open MPI 4.1's osc pt2pt completes over ofi_rxd where
     * its fence can hang (it does over libfabric's own udp;ofi_rxd too). */
    const char *mode = getenv("MPI_CHECK_RMA");
    const int passive = mode && !strcmp(mode, "lock");
    {
        const size_t blk = 256 * 1024;
        unsigned char *w = calloc(2, blk);
        CHECK(w, "out of memory");
        MPI_Win win;
        MPI_Win_create(w, (MPI_Aint)(2 * blk), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
        int to = (rank + 1) % size, from = (rank + size - 1) % size;
        fill(s, blk, rank, 100);
        if (passive) {
            /* A rank's own window is touched in an exclusive epoch of its own. */
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
            fill(w + blk, blk, rank, 200); /* what others get from this rank */
            MPI_Win_unlock(rank, win);
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_Win_lock(MPI_LOCK_SHARED, to, 0, win);
            MPI_Put(s, (int)blk, MPI_BYTE, to, 0, (int)blk, MPI_BYTE, win);
            MPI_Win_unlock(to, win);
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
            check_buf(w, blk, from, 100, "put");
            MPI_Win_unlock(rank, win);
            memset(r, 0, blk);
            MPI_Win_lock(MPI_LOCK_SHARED, from, 0, win);
            MPI_Get(r, (int)blk, MPI_BYTE, from, (MPI_Aint)blk, (int)blk, MPI_BYTE, win);
            MPI_Win_unlock(from, win);
            check_buf(r, blk, from, 200, "get");
            MPI_Barrier(MPI_COMM_WORLD);
        } else {
            fill(w + blk, blk, rank, 200); /* what others get from this rank */
            MPI_Win_fence(0, win);
            MPI_Put(s, (int)blk, MPI_BYTE, to, 0, (int)blk, MPI_BYTE, win);
            MPI_Win_fence(0, win);
            check_buf(w, blk, from, 100, "put");
            memset(r, 0, blk);
            MPI_Get(r, (int)blk, MPI_BYTE, from, (MPI_Aint)blk, (int)blk, MPI_BYTE, win);
            MPI_Win_fence(0, win);
            check_buf(r, blk, from, 200, "get");
        }
        MPI_Win_free(&win);
        free(w);
    }

    /* Where the ranks ran, in rank order (a test across hosts checks it). */
    {
        char name[MPI_MAX_PROCESSOR_NAME] = {0}, *all = calloc(size, MPI_MAX_PROCESSOR_NAME);
        int len;
        CHECK(all, "out of memory");
        MPI_Get_processor_name(name, &len);
        MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
                   MPI_COMM_WORLD);
        if (rank == 0) {
            printf("hosts:");
            for (int i = 0; i < size; i++) printf(" %s", all + (size_t)i * MPI_MAX_PROCESSOR_NAME);
            printf("\n");
        }
        free(all);
    }

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("one-sided put/get ok (%s epochs)\n", passive ? "passive-target" : "fence");
    if (rank == 0) printf("mpi_check ok ranks=%d\n", size);
    free(s);
    free(r);
    MPI_Finalize();
    return 0;
}
