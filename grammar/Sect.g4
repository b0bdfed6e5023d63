// Sect.g4: the lexical and syntactic shape of the .sect language, and nothing
// more. The grammar is deliberately loose (a block is any list of `key = expr;`
// and `name { ... }` entries, a call takes any arguments) so that every rule of
// meaning is checked in C++ (src/dsl/check.cpp) with a precise message.
// The parser is generated at build time; see src/dsl/CMakeLists.txt.
grammar Sect;

file      : stmt* EOF ;

stmt      : IMPORT STRING ';'                                   # importStmt
          | LET IDENT '=' expr ';'                              # letStmt
          | MODEL IDENT '=' expr ';'                            # modelStmt
          | SECTION IDENT block                                 # sectionStmt
          | FLOW IDENT ('->' IDENT)+ (':' IDENT)? ';'           # flowStmt
          | DATA block                                          # dataStmt
          | TRAIN block                                         # trainStmt
          ;

block     : '{' entry* '}' ;
entry     : key '=' expr ';'                                    # assignEntry
          | key block                                           # blockEntry
          ;
key       : IDENT | MODEL | DATA | TRAIN ;

// Precedence, loosest first: or, and, not, + -, * /, unary -.
expr      : andExpr (OR andExpr)* ;
andExpr   : notExpr (AND notExpr)* ;
notExpr   : NOT notExpr | sumExpr ;
sumExpr   : product (('+' | '-') product)* ;
product   : unary (('*' | '/') unary)* ;
unary     : '-' unary | primary ;
primary   : NUMBER                                              # numberLit
          | STRING                                              # stringLit
          | (TRUE | FALSE)                                      # boolLit
          | AUTO                                                # autoLit
          | IDENT '(' (arg (',' arg)* ','?)? ')'                # callExpr
          | (IDENT | TRAIN)                                     # nameRef
          | '[' (expr (',' expr)* ','?)? ']'                    # listExpr
          | '(' expr ')'                                        # parenExpr
          ;
arg       : (IDENT ':')? expr ;

IMPORT  : 'import' ;
LET     : 'let' ;
MODEL   : 'model' ;
SECTION : 'section' ;
FLOW    : 'flow' ;
DATA    : 'data' ;
TRAIN   : 'train' ;
TRUE    : 'true' ;
FALSE   : 'false' ;
AND     : 'and' ;
OR      : 'or' ;
NOT     : 'not' ;
AUTO    : 'auto' ;

IDENT   : [A-Za-z_] [A-Za-z0-9_]* ;
// Digits with `_` separators, an optional fraction and exponent, and any
// trailing letters as a unit (checked in C++: KiB MiB GiB TiB KB MB GB TB).
NUMBER  : [0-9] [0-9_]* ('.' [0-9] [0-9_]*)? ([eE] [+-]? [0-9]+)? [A-Za-z]* ;
// Escapes are checked in C++ so a bad one gets its own message.
STRING  : '"' ('\\' ~[\r\n] | ~["\\\r\n])* '"' ;
UNTERMINATED_STRING : '"' ('\\' ~[\r\n] | ~["\\\r\n])* ;

LINE_COMMENT  : ('//' | '#') ~[\r\n]* -> skip ;
BLOCK_COMMENT : '/*' .*? '*/' -> skip ;
UNTERMINATED_COMMENT : '/*' (~'*' | '*'+ ~[*/])* '*'* ;
WS      : [ \t\r\n]+ -> skip ;
// Any other character: one token, reported by the front end.
STRAY   : . ;
