package io.pgcontroller.conformance;

import io.pravega.client.admin.StreamManager;

import java.util.ArrayList;
import java.util.List;

import static io.pgcontroller.conformance.Ctx.answer;
import static io.pgcontroller.conformance.Ctx.equal;
import static io.pgcontroller.conformance.Ctx.require;
import static io.pgcontroller.conformance.StreamManagerSupport.expect;

/**
 * StreamManager's scopes: create, check, list, delete (empty, missing, holding a stream),
 * deleteScopeRecursive, and names the client refuses.
 */
public class ScopeChecks {

    @Check
    public void createScopeTwiceAnswersFalseTheSecondTime(Ctx ctx) {
        StreamManager manager = ctx.streamManager();
        String scope = ctx.unique("conf");
        expect(ctx, "first", true, manager.createScope(scope));
        expect(ctx, "second", false, manager.createScope(scope));
        ctx.observe("exists", manager.checkScopeExists(scope));
        expect(ctx, "absent exists", false, manager.checkScopeExists(ctx.unique("absent")));
        equal(true, manager.checkScopeExists(scope), "checkScopeExists of a created scope");
    }

    @Check
    public void listScopesHoldsNewScopesAndTheSystemScope(Ctx ctx) {
        String first = ctx.newScope();
        String second = ctx.newScope();
        List<String> listed = new ArrayList<>();
        ctx.streamManager().listScopes().forEachRemaining(listed::add);
        require(listed.contains(first) && listed.contains(second), "listScopes lacks a created scope: " + listed);
        ctx.observe("_system listed", listed.contains("_system"));
        equal(listed.size(), new java.util.HashSet<>(listed).size(), "scopes listed once each");
    }

    @Check
    public void deleteEmptyScopeAnswersTrueThenFalse(Ctx ctx) {
        StreamManager manager = ctx.streamManager();
        String scope = ctx.newScope();
        expect(ctx, "deleted", true, manager.deleteScope(scope));
        expect(ctx, "exists after", false, manager.checkScopeExists(scope));
        expect(ctx, "listed after", false, StreamManagerSupport.list(manager.listScopes()).contains(scope));
        expect(ctx, "deleted again", false, manager.deleteScope(scope));
        expect(ctx, "never created", false, manager.deleteScope(ctx.unique("absent")));
        expect(ctx, "recreated", true, manager.createScope(scope));
    }

    @Check
    public void deleteScopeHoldingAStreamIsRefused(Ctx ctx) {
        StreamManager manager = ctx.streamManager();
        String scope = ctx.newScope();
        String stream = ctx.newStream(scope, 1);
        ctx.observeRefusal("deleteScope", () -> manager.deleteScope(scope));
        expect(ctx, "scope exists after", true, manager.checkScopeExists(scope));
        expect(ctx, "stream exists after", true, manager.checkStreamExists(scope, stream));
        require(manager.sealStream(scope, stream), "sealStream answered false");
        ctx.observeRefusal("deleteScope with a sealed stream", () -> manager.deleteScope(scope));
    }

    @Check
    public void deleteScopeRecursiveRemovesEveryStream(Ctx ctx) throws Exception {
        StreamManager manager = ctx.streamManager();
        String scope = ctx.newScope();
        List<String> streams = List.of(ctx.newStream(scope, 1), ctx.newStream(scope, 2), ctx.newStream(scope, 3));
        EventSupport.write(EventSupport.writer(ctx, ctx.clientFactory(scope), streams.get(1)),
                StreamManagerSupport.events(0, 10));
        require(manager.sealStream(scope, streams.get(0)), "sealStream answered false");
        require(manager.sealStream(scope, streams.get(1)), "sealStream answered false");
        expect(ctx, "deleted", true, manager.deleteScopeRecursive(scope));
        expect(ctx, "scope exists after", false, manager.checkScopeExists(scope));
        for (String stream : streams) {
            equal(false, manager.checkStreamExists(scope, stream), "checkStreamExists of " + stream + " after");
        }
        expect(ctx, "scope listed after", false, StreamManagerSupport.list(manager.listScopes()).contains(scope));
        // Pravega answers SUCCESS for a scope that is not there (the client's false is for SCOPE_NOT_FOUND).
        ctx.observe("deleted again", manager.deleteScopeRecursive(scope));
        expect(ctx, "recreated", true, manager.createScope(scope));
        expect(ctx, "streams after recreation", 0, StreamManagerSupport.list(manager.listStreams(scope)).size());
    }

    @Check
    public void illegalScopeNameIsRefused(Ctx ctx) {
        StreamManager manager = ctx.streamManager();
        ctx.observeRefusal("createScope", () -> manager.createScope("bad/" + ctx.unique("scope")));
        ctx.observeRefusal("deleteScope", () -> manager.deleteScope("bad/" + ctx.unique("scope")));
        // checkScopeExists does not validate on the client, so this one reaches the server.
        expect(ctx, "checkScopeExists", "false", answer(() -> manager.checkScopeExists("bad/" + ctx.unique("scope"))));
    }
}
