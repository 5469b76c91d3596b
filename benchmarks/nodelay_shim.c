/* LD_PRELOAD shim: set TCP_NODELAY on every TCP socket a process accepts or connects.
 *
 * Used by benchmarks/router_overhead.py to run SGLang's Rust router (sglang-router 0.3.2)
 * with TCP_NODELAY (docs/performance.md): the router as shipped leaves Nagle's algorithm on, so
 * each streamed event waits for the client's delayed ACK (~40 ms). Setting the option on a
 * non-TCP socket fails with EOPNOTSUPP/ENOPROTOOPT, which is ignored.
 *
 *   gcc -shared -fPIC -O2 -o nodelay_shim.so nodelay_shim.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

static void nodelay(int fd) {
    int one = 1;
    if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int accept(int fd, struct sockaddr *addr, socklen_t *len) {
    static int (*real)(int, struct sockaddr *, socklen_t *);
    if (!real) real = dlsym(RTLD_NEXT, "accept");
    int c = real(fd, addr, len);
    nodelay(c);
    return c;
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags) {
    static int (*real)(int, struct sockaddr *, socklen_t *, int);
    if (!real) real = dlsym(RTLD_NEXT, "accept4");
    int c = real(fd, addr, len, flags);
    nodelay(c);
    return c;
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    static int (*real)(int, const struct sockaddr *, socklen_t);
    if (!real) real = dlsym(RTLD_NEXT, "connect");
    if (addr && (addr->sa_family == AF_INET || addr->sa_family == AF_INET6)) nodelay(fd);
    return real(fd, addr, len);
}
