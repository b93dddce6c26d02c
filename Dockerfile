# The batchpool server image: its binary and the libraries it loads, nothing else (no shell, no
# package manager), so building it pulls nothing. scripts/image.sh stages rootfs/ (the binary,
# the libraries `ldd` lists, the loader, the host's CA certificates) in target/image/ with this
# file, and builds there: `scripts/image.sh [TAG]`, then `docker compose up`.
FROM scratch
COPY rootfs/ /
ENV BATCHPOOL_LISTEN=0.0.0.0:8080 \
    BATCHPOOL_DATA_DIR=/var/lib/batchpool
EXPOSE 8080 8081
HEALTHCHECK --interval=10s --timeout=6s CMD ["/usr/local/bin/batchpool", "health"]
ENTRYPOINT ["/usr/local/bin/batchpool"]
CMD ["serve"]
