package io.pgcontroller.conformance;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * One conformance check: a public method {@code void name(Ctx ctx) throws Exception} of a public
 * class named {@code *Checks} in this package. It passes when it returns, and fails when it throws.
 * Every check runs once against each server, on its own scope, possibly beside other checks.
 */
@Retention(RetentionPolicy.RUNTIME)
@Target(ElementType.METHOD)
public @interface Check {
    /** The servers it needs: {@code plain} (no auth, no TLS) or {@code secure} (auth and TLS on). */
    String profile() default "plain";

    /** Seconds after which a check that has not ended counts as failed (a hang is a failure). */
    int timeoutSeconds() default 120;
}
