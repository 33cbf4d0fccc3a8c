"""The REST plumbing every app's router uses: API-key auth, error table, bodies, paging."""
