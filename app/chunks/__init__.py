"""Long-term storage of segment bytes (the second tier): chunk objects on a filesystem or in
S3-compatible object storage. PostgreSQL keeps the index of which chunk holds which bytes
(app/store/tiering.py); these backends only keep bytes under names."""
