package io.pgcontroller.conformance;

import io.pravega.client.ClientConfig;
import io.pravega.shared.security.auth.DefaultCredentials;

import java.net.URI;

/** One controller under test: where it is and how a client reaches it. */
public record Server(String label, URI controller, String user, String password, String trustStore) {

    public ClientConfig clientConfig() {
        ClientConfig.ClientConfigBuilder builder = ClientConfig.builder().controllerURI(controller);
        if (user != null) {
            builder.credentials(new DefaultCredentials(password, user));
        }
        if (trustStore != null) {
            builder.trustStore(trustStore).validateHostName(true);
        }
        return builder.build();
    }

    public boolean secure() {
        return user != null || trustStore != null;
    }
}
