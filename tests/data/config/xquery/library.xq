module namespace t = "urn:test";
declare function t:f() { 1 };
