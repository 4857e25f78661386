"""ops/fallback"""
