// The committed API types must be what `npm run gen:api` makes of the committed
// openapi.json snapshot: regenerate in memory and compare.
import openapiTS from "openapi-typescript";
import { describe, expect, it } from "vitest";
import snapshot from "../../openapi.json?raw";
import committed from "./api.gen.ts?raw";

describe("api.gen.ts", () => {
  it("matches the openapi.json snapshot (run `npm run gen:api` after refreshing it)", async () => {
    const generated = await openapiTS(JSON.parse(snapshot));
    expect(committed).toBe(generated);
  });
});
