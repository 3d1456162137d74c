package io.pgcontroller.conformance.oracle;

import io.pravega.auth.AuthException;
import io.pravega.auth.AuthHandler;
import io.pravega.auth.AuthenticationException;

import java.security.Principal;

/**
 * The conformance suite's token-based credential on Pravega's side: the method {@code Bearer}
 * with one token, which may do everything. Pravega's controller finds it through the ServiceLoader
 * (META-INF/services); {@code tests/conformance/token_plugin.py} is the same handler for serve, so
 * SecurityChecks can hold a token credential against both servers. The token and the principal's
 * name must stay equal to those of the Python handler and of SecurityChecks.
 */
public final class TokenAuthHandler implements AuthHandler {
    static final String TOKEN = "conformance-bearer-token";
    static final String PRINCIPAL = "token-user";

    @Override
    public String getHandlerName() {
        return "Bearer";
    }

    @Override
    public Principal authenticate(String token) throws AuthException {
        if (!TOKEN.equals(token)) {
            throw new AuthenticationException("unknown bearer token");
        }
        return () -> PRINCIPAL;
    }

    @Override
    public Permissions authorize(String resource, Principal principal) {
        return PRINCIPAL.equals(principal.getName()) ? Permissions.READ_UPDATE : Permissions.NONE;
    }
}
