import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Set;

import javax.security.auth.callback.Callback;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.security.auth.login.AppConfigurationEntry;

import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerToken;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerTokenCallback;

/**
 * The Java client's OAUTHBEARER login with a JWT the test signed (tests/interop/
 * test_java_secure.py): the token comes from the JAAS line's {@code token} option, the
 * way a company's own login callback handler would hand one over from its identity
 * provider. Kafka's {@code OAuthBearerLoginModule} sends it; the broker validates it
 * against the test's JWKS.
 *
 * <pre>
 * sasl.login.callback.handler.class=StaticTokenLogin
 * sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required token="eyJ...";
 * </pre>
 */
public class StaticTokenLogin implements AuthenticateCallbackHandler {
    private String token;

    @Override
    public void configure(Map<String, ?> configs, String mechanism,
                          List<AppConfigurationEntry> entries) {
        token = (String) entries.get(0).getOptions().get("token");
        if (token == null) {
            throw new IllegalArgumentException("StaticTokenLogin needs a token=\"...\" option");
        }
    }

    @Override
    public void handle(Callback[] callbacks) throws UnsupportedCallbackException {
        for (Callback callback : callbacks) {
            if (!(callback instanceof OAuthBearerTokenCallback)) {
                throw new UnsupportedCallbackException(callback);
            }
            ((OAuthBearerTokenCallback) callback).token(parse(token));
        }
    }

    private static OAuthBearerToken parse(String jwt) {
        String payload = new String(Base64.getUrlDecoder().decode(jwt.split("\\.")[1]));
        long exp = Long.parseLong(claim(payload, "exp")) * 1000;
        String sub = claim(payload, "sub");
        return new OAuthBearerToken() {
            public String value() { return jwt; }
            public Set<String> scope() { return Set.of(); }
            public long lifetimeMs() { return exp; }
            public String principalName() { return sub; }
            public Long startTimeMs() { return null; }
        };
    }

    /** One claim of a flat JSON object: enough for the test's tokens ("sub", "exp"). */
    private static String claim(String json, String name) {
        int at = json.indexOf("\"" + name + "\"");
        int start = json.indexOf(':', at) + 1;
        int end = start;
        while (end < json.length() && ",}".indexOf(json.charAt(end)) < 0) {
            end++;
        }
        return json.substring(start, end).trim().replace("\"", "");
    }

    @Override
    public void close() {
    }
}
