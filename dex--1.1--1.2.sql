/*
 * dex 1.1 -> 1.2: ALTER EXTENSION dex UPDATE TO '1.2'.
 *
 * What 1.2 changes: security and data safety (issue 13).  Each section below
 * says what it fixes.  The library of 1.2 works with a 1.1 schema until the
 * update.  test/t/009_upgrade.pl checks that an updated database has exactly
 * the objects of a fresh 1.2 install.
 */
\echo Use "ALTER EXTENSION dex UPDATE TO '1.2'" to load this file. \quit
